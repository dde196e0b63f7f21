#include "actors/job_table.hpp"

#include <algorithm>

namespace bb {

uint64_t job_table::add(const op_inputs& op, uint32_t first_version) {
  auto id = next_id_++;
  entry e;
  e.version = first_version;
  e.job.job_id = id;
  e.job.op_name = op.op_name;
  e.job.correctness_inputs = op.correctness;
  e.job.performance_inputs = op.performance;
  jobs_.emplace(id, std::move(e));
  return id;
}

void job_table::set_artefact(uint64_t id, artefact kernel) {
  auto& e = jobs_.at(id);
  e.job.kernel = std::move(kernel);
  if (e.st == state::generating) {
    e.st = state::queued;
    queue_.push_back(id);
  }
}

std::optional<eval_job> job_table::next() {
  if (queue_.empty())
    return std::nullopt;
  auto id = queue_.front();
  queue_.pop_front();
  auto& e = jobs_.at(id);
  e.st = state::running;
  ++e.job.attempt;
  return e.job;
}

job_table::verdict job_table::finish(const eval_result& result) {
  auto it = jobs_.find(result.job_id);
  if (it == jobs_.end())
    return verdict::stale;
  auto& e = it->second;
  if (e.st == state::done || e.st == state::reviewing || result.attempt != e.job.attempt)
    return verdict::stale;
  // The attempt number names each dispatch (so late results are recognized); the bounds
  // count kernel faults and infrastructure retries apart.
  bool retry = false;
  if (e.st == state::running && is_infrastructure(result.outcome))
    retry = e.infra_retries++ < max_infra_retries_;
  else if (e.st == state::running && is_retryable(result.outcome))
    retry = ++e.faults < max_attempts_;
  if (retry) {
    e.st = state::queued;
    queue_.push_back(result.job_id);
    return verdict::retry;
  }
  e.st = state::reviewing;
  return verdict::terminal;
}

void job_table::close(uint64_t id) {
  auto& e = jobs_.at(id);
  if (e.st == state::done)
    return;
  if (e.st == state::queued)
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
  e.st = state::done;
  ++done_;
}

uint32_t job_table::revise(uint64_t id) {
  auto& e = jobs_.at(id);
  if (e.st == state::reviewing) {
    e.st = state::generating;
    e.faults = 0;
    e.infra_retries = 0;
    ++e.version;
  }
  return e.version;
}

eval_job job_table::abandon(uint64_t id) {
  auto& e = jobs_.at(id);
  if (e.st == state::queued)
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
  if (e.st != state::done) {
    e.st = state::done;
    ++done_;
  }
  return e.job;
}

std::vector<uint64_t> job_table::unfinished() const {
  std::vector<uint64_t> out;
  for (auto& [id, e] : jobs_)
    if (e.st != state::done)
      out.push_back(id);
  return out;
}

} // namespace bb
