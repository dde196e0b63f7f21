#pragma once

// bbrunner's evaluation core: builds inputs, runs the aten reference and the kernel, checks
// and times. This header is torch-free; the implementation links libtorch.

#include <cstdint>
#include <string>

#include "messages/records.hpp"

namespace bb::runner {

struct options {
  /// "cpu" or "cuda" ("cuda" means the one device this runner sees).
  std::string device = "cpu";
  std::string node;
  int64_t cpu_warmup = 10;
  int64_t cpu_runs = 100;
  /// Budget of one cpu_bench measurement in seconds; past it, warm-up and timed calls stop
  /// early (at least one of each). 0: no budget, BackendBench's fixed counts.
  double cpu_max_seconds = 0.0;
  double atol = 1e-2;
  double rtol = 1e-2;
};

/// Where this runner measures: node, device name, driver, torch version.
provenance describe(const options& opts);

/// The dispatcher schema of an op name (aten.X.Y), or "" when this torch lacks it.
std::string resolve_schema(const std::string& op_name);

/// The tensors built for one input of `op_name`, a line each (sizes, strides, dtype and a
/// checksum of their values), for --print-inputs; an error text when the input cannot be built.
std::string describe_input(const std::string& op_name, const std::string& call_text,
                           const options& opts);

/// Evaluates every input of `job`; never throws (a failure becomes the job's outcome).
eval_result evaluate_job(const eval_job& job, const options& opts);

} // namespace bb::runner
