#pragma once

// What the runner's tests evaluate: a job of the aten backend, and timing options quick enough
// for a test.

#include <string>
#include <vector>

#include "messages/runner_protocol.hpp"

namespace bb::test {

inline bb::eval_job aten_job(const std::string& op, std::vector<std::string> inputs) {
  bb::eval_job job;
  job.job_id = 1;
  job.attempt = 1;
  job.op_name = op;
  job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
  job.correctness_inputs = inputs;
  job.performance_inputs = inputs;
  return job;
}

inline bb::runner_options quick_options() {
  bb::runner_options opts;
  opts.cpu_warmup = 1;
  opts.cpu_runs = 4;
  opts.cpu_max_seconds = 0.5;
  // Four runs on a loaded machine make outliers of honest calls: a speedup measured again
  // (suspicious_speedup) is not what these tests check, and its flag would fail their
  // flags.empty(). The tests of that check set their own.
  opts.suspicious_speedup = 0;
  return opts;
}

} // namespace bb::test
