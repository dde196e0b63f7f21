#include "results/results.hpp"

#include <algorithm>

#include "suite/args.hpp"

namespace bb {

namespace {

correctness_record failed_correctness(const std::string& op, const std::string& args, outcome why,
                                      const std::string& detail) {
  correctness_record c;
  c.op_name = op;
  c.args = args;
  c.error_type = to_string(why);
  c.error_msg = detail;
  return c;
}

performance_record failed_performance(const std::string& op, const std::string& args, outcome why,
                                      const std::string& detail) {
  performance_record p;
  p.op_name = op;
  p.args = args;
  p.speedup = 1.0;
  p.error_msg = to_string(why) + std::string(": ") + detail;
  return p;
}

// The outcome an unsharded job would have ended with, and its detail.
std::pair<outcome, std::string> merged_outcome(const std::vector<eval_result>& shards) {
  for (auto& s : shards)
    if (s.outcome != outcome::ok && s.outcome != outcome::reference_error)
      return {s.outcome, s.detail};
  // A shard whose every reference failed says so in its records; only when every shard's
  // did is it the operator's outcome.
  bool every = std::all_of(shards.begin(), shards.end(),
                           [](const eval_result& s) { return s.outcome == outcome::reference_error; });
  if (every && !shards.empty())
    return {outcome::reference_error, shards.front().detail};
  return {outcome::ok, ""};
}

} // namespace

eval_result failed_result(const eval_job& job, outcome why, const std::string& detail) {
  auto r = result_for(job);
  r.outcome = why;
  r.detail = detail;
  for (auto& args : job.correctness_inputs)
    r.correctness.push_back(failed_correctness(job.op_name, args::serialize_text(args), why, detail));
  for (auto& args : job.performance_inputs)
    r.performance.push_back(failed_performance(job.op_name, args::serialize_text(args), why, detail));
  return r;
}

eval_result merge_shards(std::vector<eval_result> shards) {
  if (shards.size() == 1 && !shards.front().shard.is_part())
    return std::move(shards.front());
  std::stable_sort(shards.begin(), shards.end(), [](const eval_result& a, const eval_result& b) {
    return std::make_pair(a.shard.correctness_begin, a.shard.performance_begin)
           < std::make_pair(b.shard.correctness_begin, b.shard.performance_begin);
  });
  eval_result out;
  if (shards.empty())
    return out;
  auto& first = shards.front();
  out.job_id = first.job_id;
  out.op_name = first.op_name;
  out.where = first.where;
  out.version = first.version;
  out.shards = static_cast<uint32_t>(shards.size());
  out.shard.correctness_total = out.shard.correctness_count = first.shard.correctness_total;
  out.shard.performance_total = out.shard.performance_count = first.shard.performance_total;
  std::tie(out.outcome, out.detail) = merged_outcome(shards);
  // Performance records in the order of their inputs: a shard of performance inputs only
  // (when they are not the correctness inputs) sorts by its own begin.
  std::vector<const eval_result*> by_performance;
  for (auto& s : shards) {
    by_performance.push_back(&s);
    out.correctness.insert(out.correctness.end(), s.correctness.begin(), s.correctness.end());
    out.attempt = std::max(out.attempt, s.attempt);
    out.wall_seconds += s.wall_seconds;
    out.runner_restarts += s.runner_restarts;
    for (auto& [phase, seconds] : s.phases)
      out.phases[phase] += seconds;
    for (auto& f : s.flags)
      if (std::find(out.flags.begin(), out.flags.end(), f) == out.flags.end())
        out.flags.push_back(f);
  }
  std::stable_sort(by_performance.begin(), by_performance.end(), [](auto* a, auto* b) {
    return a->shard.performance_begin < b->shard.performance_begin;
  });
  for (auto* s : by_performance)
    out.performance.insert(out.performance.end(), s->performance.begin(), s->performance.end());
  if (is_retryable(out.outcome)) {
    for (auto& c : out.correctness)
      c = failed_correctness(out.op_name, c.args, out.outcome, out.detail);
    for (auto& p : out.performance)
      p = failed_performance(out.op_name, p.args, out.outcome, out.detail);
  }
  return out;
}

} // namespace bb
