#pragma once

// bbrunner's evaluation core: builds inputs, runs the aten reference and the kernel, checks
// and times. This header is torch-free; the implementation links libtorch.

#include <cstdint>
#include <functional>
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
  /// do_bench's warm-up and repetition budgets (ms of estimated time) and flush buffer.
  double gpu_warmup_ms = 25.0;
  double gpu_rep_ms = 100.0;
  int64_t flush_bytes = int64_t{256} << 20;
  double atol = 1e-2;
  double rtol = 1e-2;
};

/// Called before each step that runs kernel or reference code, naming it; the evaluator's
/// per-call timeout restarts on each. `setup` marks a step that sets the runner up (loading a
/// kernel, starting Python), bounded by the start timeout instead.
using progress_fn = std::function<void(const std::string& step, bool setup)>;

/// Where this runner measures: node, device name, driver, torch version.
provenance describe(const options& opts);

/// The dispatcher schema of an op name (aten.X.Y), or "" when this torch lacks it.
std::string resolve_schema(const std::string& op_name);

/// The tensors built for one input of `op_name`, a line each (sizes, strides, dtype and a
/// checksum of their values), for --print-inputs; an error text when the input cannot be built.
std::string describe_input(const std::string& op_name, const std::string& call_text,
                           const options& opts);

/// Allocates, computes and synchronizes on the runner's device: "" when that works, else why.
std::string check_device(const options& opts);

/// Evaluates every input of `job`; never throws (a failure becomes the job's outcome).
/// Outcome cuda_error means the CUDA context is lost: the runner must exit after replying.
eval_result evaluate_job(const eval_job& job, const options& opts, const progress_fn& progress);

} // namespace bb::runner
