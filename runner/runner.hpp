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
  double atol = 1e-2;
  double rtol = 1e-2;
};

/// Where this runner measures: node, device name, driver, torch version.
provenance describe(const options& opts);

/// Evaluates every input of `job`; never throws (a failure becomes the job's outcome).
eval_result evaluate_job(const eval_job& job, const options& opts);

} // namespace bb::runner
