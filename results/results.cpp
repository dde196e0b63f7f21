#include "results/results.hpp"

#include "suite/args.hpp"

namespace bb {

eval_result failed_result(const eval_job& job, outcome why, const std::string& detail) {
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  r.outcome = why;
  r.detail = detail;
  r.where.artefact_hash = job.kernel.hash;
  for (auto& args : job.correctness_inputs) {
    correctness_record c;
    c.op_name = job.op_name;
    c.args = args::serialize_text(args);
    c.error_type = to_string(why);
    c.error_msg = detail;
    r.correctness.push_back(std::move(c));
  }
  for (auto& args : job.performance_inputs) {
    performance_record p;
    p.op_name = job.op_name;
    p.args = args::serialize_text(args);
    p.speedup = 1.0;
    p.error_msg = to_string(why) + std::string(": ") + detail;
    r.performance.push_back(std::move(p));
  }
  return r;
}

} // namespace bb
