#pragma once

// The coordinator's job table: every operator from creation to exactly one terminal state,
// evaluated as one job or as shards (docs/architecture.md, "Shards"), each job with its
// attempt count and the retry policy, dispatched longest expected work first. No actors here.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "messages/records.hpp"
#include "suite/shards.hpp"
#include "suite/suite.hpp"

namespace bb {

/// How one operator is to be evaluated.
struct op_plan {
  /// Its units' expected seconds; empty: one second each.
  op_work work;
  /// Shards of about this many expected seconds; 0: one job for the operator.
  double target_seconds = 0.0;
  /// Shards a resumed sweep finished before: their inputs are not run again, their records
  /// join the operator's result. Only for operators with one kernel (never revised).
  std::vector<eval_result> earlier;
};

/// Each operator's plan for a sweep over `slots` slots: its estimated work (`estimates` by
/// name; one second per input without one), cut into shards of the sweep's expected work per
/// slot divided by `shards_per_slot` and at most `max_shard_seconds` (shard_target; 0, or a
/// single slot without a cap: one job per operator), without the inputs of the shards in
/// `earlier` (by name).
std::vector<op_plan> plan_operators(const suite& work, const std::map<std::string, op_work>& estimates,
                                    const std::map<std::string, std::vector<eval_result>>& earlier,
                                    size_t slots, double shards_per_slot, double max_shard_seconds = 0.0);

class job_table {
public:
  /// An operator's state: waiting for its kernel (generating), with shards in the queue
  /// (queued) or all dispatched (running), its evaluated version waiting for the generator's
  /// word (reviewing), or done.
  enum class state { generating, queued, running, reviewing, done };

  /// `max_attempts` bounds the attempts of a job whose runner crashed or timed out (a kernel
  /// fault until proven otherwise); `max_infra_retries` bounds the retries after an
  /// infrastructure failure (a lost evaluator or node), which do not count as attempts. Both
  /// count per job: per shard of a sharded operator.
  explicit job_table(uint32_t max_attempts, uint32_t max_infra_retries = 3)
    : max_attempts_(max_attempts), max_infra_retries_(max_infra_retries) {
  }

  /// Whether next() cuts a queued shard down to the queue's share per slot (guided
  /// self-scheduling): as the queue drains, shards get shorter, so the last ones end together.
  void split_at_dispatch(bool on) {
    split_ = on;
  }

  /// Adds an operator, waiting for its artefact; returns its id. A resumed campaign's
  /// operator starts at the version after those already evaluated.
  uint64_t add(const op_inputs& op, uint32_t first_version = 1, op_plan plan = {});

  /// The generator delivered the kernel: the operator's shards join the queue. An operator
  /// whose every input a resumed sweep finished has none: it goes to `reviewing` at once.
  void set_artefact(uint64_t id, artefact kernel);

  /// Takes the queued job with the most expected work, marks it running and counts the
  /// attempt. With splitting on, a shard longer than the queue's expected work divided by
  /// `slots` is cut: its first inputs within that share run, the rest stays queued.
  std::optional<eval_job> next(size_t slots = 1);

  /// What the caller must do with a finished attempt.
  enum class verdict {
    /// The operator's version is evaluated: every shard is terminal (merged()).
    terminal,
    /// This shard is terminal; others of its operator are not yet.
    shard,
    /// The job goes back to the queue.
    retry,
    /// A late duplicate or a job of a finished operator: changes nothing.
    stale
  };

  /// Records the end of an attempt. A crash, timeout or infrastructure failure goes back to
  /// the queue while attempts remain (retry); anything else is terminal for the job. When
  /// every shard of its operator is terminal, the version is evaluated and the operator waits
  /// in `reviewing` for its generator's word (`close` or `revise`).
  verdict finish(const eval_result& result);

  /// A version that ends without an evaluation (no kernel, a build that failed, a generator
  /// that failed): `result` is its result, and the operator waits in `reviewing`.
  void end_version(uint64_t id, eval_result result);

  /// The evaluated version's result: its shards' results merged in input order (with those a
  /// resumed sweep finished before), or the result end_version gave.
  eval_result merged(uint64_t id) const;

  /// The operator a job belongs to.
  uint64_t operator_of(uint64_t job_id) const;

  /// Whether the operator is evaluated in more than one job (counting a resumed sweep's).
  bool sharded(uint64_t id) const;

  /// The generator made its result final: the operator is done.
  void close(uint64_t id);

  /// The generator writes another version: the operator waits for its artefact again, each
  /// shard with fresh fault bounds (a new kernel); returns the new version number.
  uint32_t revise(uint64_t id);

  /// The kernel version the operator evaluates (1, 2, ...).
  uint32_t version(uint64_t id) const {
    return ops_.at(id).version;
  }

  /// Ends an operator that will not run (no evaluator left): it is done, whatever its state.
  /// Returns it as one job with every input, for its failure record.
  eval_job abandon(uint64_t id);

  /// The operator as one job with every input and its kernel.
  const eval_job& job(uint64_t id) const {
    return ops_.at(id).whole;
  }

  state state_of(uint64_t id) const {
    return ops_.at(id).st;
  }

  /// Operators.
  size_t size() const {
    return ops_.size();
  }

  size_t done() const {
    return done_;
  }

  bool all_done() const {
    return done_ == ops_.size();
  }

  /// Jobs in the queue.
  size_t queued() const {
    return queue_.size();
  }

  /// Ids of the operators that are not done, in id order.
  std::vector<uint64_t> unfinished() const;

private:
  enum class job_state { waiting, queued, running, finished };
  struct shard {
    uint64_t op = 0;
    unit_range units;
    double seconds = 0.0;
    eval_job job;
    job_state st = job_state::waiting;
    /// Attempts ended by a crash or timeout, and retries after infrastructure failures.
    uint32_t faults = 0;
    uint32_t infra_retries = 0;
    eval_result result;
  };
  struct entry {
    op_inputs inputs;
    op_plan plan;
    eval_job whole;
    state st = state::generating;
    uint32_t version = 1;
    /// Its shards, in input order.
    std::vector<uint64_t> shards;
    /// The result of a version that ended without an evaluation.
    std::optional<eval_result> ended;
  };

  void make_shards(uint64_t op_id, entry& e, const std::vector<unit_range>& cuts);
  uint64_t make_shard(uint64_t op_id, const entry& e, unit_range units, uint64_t id);
  void enqueue(uint64_t job_id);
  void dequeue(uint64_t job_id);
  /// Replaces queued shard `job_id` by its first units within `limit` and the rest, both
  /// queued; returns the first's id (`job_id` when nothing was cut off).
  uint64_t split(uint64_t job_id, double limit);
  void refresh_state(entry& e);

  uint32_t max_attempts_;
  uint32_t max_infra_retries_;
  bool split_ = false;
  uint64_t next_id_ = 1;
  size_t done_ = 0;
  std::map<uint64_t, entry> ops_;
  std::map<uint64_t, shard> jobs_;
  /// Queued jobs, most expected seconds first (then the lower id), and their total.
  std::set<std::pair<double, uint64_t>> queue_;
  double queued_seconds_ = 0.0;
};

} // namespace bb
