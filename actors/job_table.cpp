#include "actors/job_table.hpp"

#include <algorithm>

#include "results/results.hpp"

namespace bb {

namespace {

// The inputs of `span` out of the operator's.
std::vector<std::string> slice(const std::vector<std::string>& all, uint32_t begin, uint32_t count) {
  auto first = all.begin() + std::min<size_t>(begin, all.size());
  auto last = all.begin() + std::min<size_t>(begin + count, all.size());
  return {first, last};
}

} // namespace

std::vector<op_plan> plan_operators(const suite& work, const std::map<std::string, op_work>& estimates,
                                    const std::map<std::string, std::vector<eval_result>>& earlier,
                                    size_t slots, double shards_per_slot, double max_shard_seconds) {
  std::vector<op_plan> plans;
  double total = 0.0;
  for (auto& op : work.ops) {
    op_plan p;
    auto known = estimates.find(op.op_name);
    p.work = known != estimates.end() ? known->second : uniform_work(op);
    if (auto done = earlier.find(op.op_name); done != earlier.end())
      p.earlier = done->second;
    total += p.work.total();
    plans.push_back(std::move(p));
  }
  auto target = shard_target(total, slots, shards_per_slot, max_shard_seconds);
  for (auto& p : plans)
    p.target_seconds = target;
  return plans;
}

uint64_t job_table::add(const op_inputs& op, uint32_t first_version, op_plan plan) {
  auto id = next_id_++;
  entry e;
  e.inputs = op;
  e.version = first_version;
  if (plan.work.seconds.empty())
    plan.work = uniform_work(op);
  e.plan = std::move(plan);
  e.whole.job_id = id;
  e.whole.op_name = op.op_name;
  e.whole.correctness_inputs = op.correctness;
  e.whole.performance_inputs = op.performance;
  e.whole.shard = span_of(e.plan.work, {0, static_cast<uint32_t>(e.plan.work.seconds.size())});
  std::vector<unit_range> done;
  for (auto& r : e.plan.earlier)
    for (auto& u : units_of(e.plan.work, r.shard))
      done.push_back(u);
  auto left = units_left(e.plan.work, done);
  make_shards(id, e, cut_shards(e.plan.work, left, e.plan.target_seconds));
  ops_.emplace(id, std::move(e));
  return id;
}

void job_table::make_shards(uint64_t op_id, entry& e, const std::vector<unit_range>& cuts) {
  auto n = static_cast<uint32_t>(e.plan.work.seconds.size());
  bool whole = cuts.size() == 1 && cuts.front().begin == 0 && cuts.front().end == n && e.plan.earlier.empty();
  // An operator without inputs still runs once: the runner says whether it exists here.
  if (cuts.empty() && n == 0)
    e.shards.push_back(make_shard(op_id, e, {0, 0}, op_id));
  for (auto& c : cuts)
    // The one job of an unsharded operator keeps the operator's id, as before shards.
    e.shards.push_back(make_shard(op_id, e, c, whole ? op_id : next_id_++));
}

uint64_t job_table::make_shard(uint64_t op_id, const entry& e, unit_range units, uint64_t id) {
  shard s;
  s.op = op_id;
  s.units = units;
  s.seconds = seconds_of(e.plan.work, units);
  s.job.job_id = id;
  s.job.op_name = e.inputs.op_name;
  s.job.kernel = e.whole.kernel;
  s.job.shard = span_of(e.plan.work, units);
  s.job.correctness_inputs = slice(e.inputs.correctness, s.job.shard.correctness_begin, s.job.shard.correctness_count);
  s.job.performance_inputs = slice(e.inputs.performance, s.job.shard.performance_begin, s.job.shard.performance_count);
  jobs_[id] = std::move(s);
  return id;
}

void job_table::enqueue(uint64_t job_id) {
  auto& s = jobs_.at(job_id);
  s.st = job_state::queued;
  queue_.insert({-s.seconds, job_id});
  queued_seconds_ += s.seconds;
}

void job_table::dequeue(uint64_t job_id) {
  auto& s = jobs_.at(job_id);
  if (queue_.erase({-s.seconds, job_id}) > 0)
    queued_seconds_ = std::max(0.0, queued_seconds_ - s.seconds);
}

void job_table::refresh_state(entry& e) {
  if (e.st == state::done || e.st == state::reviewing || e.st == state::generating)
    return;
  bool any_queued = std::any_of(e.shards.begin(), e.shards.end(),
                                [&](uint64_t j) { return jobs_.at(j).st == job_state::queued; });
  e.st = any_queued ? state::queued : state::running;
}

void job_table::set_artefact(uint64_t id, artefact kernel) {
  auto& e = ops_.at(id);
  e.whole.kernel = kernel;
  for (auto j : e.shards)
    jobs_.at(j).job.kernel = kernel;
  if (e.st != state::generating)
    return;
  if (e.shards.empty()) {
    e.st = state::reviewing;
    return;
  }
  e.st = state::queued;
  for (auto j : e.shards)
    enqueue(j);
}

uint64_t job_table::split(uint64_t job_id, double limit) {
  auto old = jobs_.at(job_id);
  auto& e = ops_.at(old.op);
  auto head = head_within(e.plan.work, old.units, limit);
  if (head.end >= old.units.end)
    return job_id;
  dequeue(job_id);
  jobs_.erase(job_id);
  uint64_t ids[2];
  unit_range parts[2] = {head, {head.end, old.units.end}};
  for (int i = 0; i < 2; ++i) {
    ids[i] = make_shard(old.op, e, parts[i], next_id_++);
    auto& s = jobs_.at(ids[i]);
    s.faults = old.faults;
    s.infra_retries = old.infra_retries;
    enqueue(ids[i]);
  }
  auto at = std::find(e.shards.begin(), e.shards.end(), job_id);
  *at = ids[1];
  e.shards.insert(at, ids[0]);
  return ids[0];
}

std::optional<eval_job> job_table::next(size_t slots) {
  if (queue_.empty())
    return std::nullopt;
  auto id = queue_.begin()->second;
  double limit = queued_seconds_ / static_cast<double>(std::max<size_t>(1, slots));
  if (split_ && jobs_.at(id).seconds > limit)
    id = split(id, limit);
  dequeue(id);
  auto& s = jobs_.at(id);
  s.st = job_state::running;
  ++s.job.attempt;
  refresh_state(ops_.at(s.op));
  return s.job;
}

job_table::verdict job_table::finish(const eval_result& result) {
  auto it = jobs_.find(result.job_id);
  if (it == jobs_.end())
    return verdict::stale;
  auto& s = it->second;
  auto& e = ops_.at(s.op);
  if (e.st == state::done || e.st == state::reviewing || s.st != job_state::running
      || result.attempt != s.job.attempt)
    return verdict::stale;
  // The attempt number names each dispatch (so late results are recognized); the bounds
  // count kernel faults and infrastructure retries apart.
  bool retry = false;
  if (is_infrastructure(result.outcome))
    retry = s.infra_retries++ < max_infra_retries_;
  else if (is_retryable(result.outcome))
    retry = ++s.faults < max_attempts_;
  if (retry) {
    enqueue(result.job_id);
    refresh_state(e);
    return verdict::retry;
  }
  s.st = job_state::finished;
  s.result = result;
  s.result.shard = s.job.shard;
  bool all = std::all_of(e.shards.begin(), e.shards.end(),
                         [&](uint64_t j) { return jobs_.at(j).st == job_state::finished; });
  if (!all)
    return verdict::shard;
  e.st = state::reviewing;
  return verdict::terminal;
}

void job_table::end_version(uint64_t id, eval_result result) {
  auto& e = ops_.at(id);
  if (e.st != state::generating)
    return;
  e.ended = std::move(result);
  e.st = state::reviewing;
}

eval_result job_table::merged(uint64_t id) const {
  auto& e = ops_.at(id);
  if (e.ended)
    return *e.ended;
  auto parts = e.plan.earlier;
  for (auto j : e.shards)
    parts.push_back(jobs_.at(j).result);
  auto r = merge_shards(std::move(parts));
  r.job_id = id;
  r.op_name = e.inputs.op_name;
  return r;
}

uint64_t job_table::operator_of(uint64_t job_id) const {
  return jobs_.at(job_id).op;
}

bool job_table::sharded(uint64_t id) const {
  auto& e = ops_.at(id);
  return e.shards.size() + e.plan.earlier.size() > 1;
}

void job_table::close(uint64_t id) {
  auto& e = ops_.at(id);
  if (e.st == state::done)
    return;
  for (auto j : e.shards)
    dequeue(j);
  e.st = state::done;
  ++done_;
}

uint32_t job_table::revise(uint64_t id) {
  auto& e = ops_.at(id);
  if (e.st != state::reviewing)
    return e.version;
  e.st = state::generating;
  e.ended.reset();
  ++e.version;
  if (!e.plan.earlier.empty()) {
    // A new kernel: what a resumed sweep finished before was another kernel's.
    e.plan.earlier.clear();
    for (auto j : e.shards)
      jobs_.erase(j);
    e.shards.clear();
    make_shards(id, e, cut_shards(e.plan.work, units_left(e.plan.work, {}), e.plan.target_seconds));
  }
  for (auto j : e.shards) {
    auto& s = jobs_.at(j);
    s.st = job_state::waiting;
    s.faults = 0;
    s.infra_retries = 0;
    s.result = {};
  }
  return e.version;
}

eval_job job_table::abandon(uint64_t id) {
  auto& e = ops_.at(id);
  for (auto j : e.shards)
    dequeue(j);
  if (e.st != state::done) {
    e.st = state::done;
    ++done_;
  }
  return e.whole;
}

std::vector<uint64_t> job_table::unfinished() const {
  std::vector<uint64_t> out;
  for (auto& [id, e] : ops_)
    if (e.st != state::done)
      out.push_back(id);
  return out;
}

} // namespace bb
