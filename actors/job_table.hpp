#pragma once

// The coordinator's job table: every job from creation to exactly one terminal state, with
// its attempt count and the retry policy. No actors here.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "suite/suite.hpp"
#include "messages/records.hpp"

namespace bb {

class job_table {
public:
  enum class state { generating, queued, running, reviewing, done };

  /// `max_attempts` bounds the attempts of a job whose runner crashed or timed out (a kernel
  /// fault until proven otherwise); `max_infra_retries` bounds the retries after an
  /// infrastructure failure (a lost evaluator or node), which do not count as attempts.
  explicit job_table(uint32_t max_attempts, uint32_t max_infra_retries = 3)
    : max_attempts_(max_attempts), max_infra_retries_(max_infra_retries) {
  }

  /// Adds a job for one operator, waiting for its artefact; returns its id. A resumed
  /// campaign's operator starts at the version after those already evaluated.
  uint64_t add(const op_inputs& op, uint32_t first_version = 1);

  /// The generator delivered the kernel: the job joins the queue.
  void set_artefact(uint64_t id, artefact kernel);

  /// Takes the next queued job, marks it running and counts the attempt.
  std::optional<eval_job> next();

  /// What the caller must do with a finished attempt.
  enum class verdict { terminal, retry, stale };

  /// Records the end of an attempt. A crash, timeout or infrastructure failure goes back to
  /// the queue while attempts remain (retry); anything else is terminal: the kernel version
  /// is evaluated and the job waits in `reviewing` for its generator's word (`close` or
  /// `revise`). A result for an attempt that is no longer running (a late duplicate) is
  /// stale and changes nothing.
  verdict finish(const eval_result& result);

  /// The generator made its result final: the job is done.
  void close(uint64_t id);

  /// The generator writes another version: the job waits for its artefact again, with fresh
  /// fault bounds (a new kernel); returns the new version number.
  uint32_t revise(uint64_t id);

  /// The kernel version the job evaluates (1, 2, ...).
  uint32_t version(uint64_t id) const {
    return jobs_.at(id).version;
  }

  /// Ends a job that will not run (no evaluator left): it is done, whatever its state.
  /// Returns it as last sent, for its failure record.
  eval_job abandon(uint64_t id);

  /// The job, as last sent (or as it will be sent).
  const eval_job& job(uint64_t id) const {
    return jobs_.at(id).job;
  }

  state state_of(uint64_t id) const {
    return jobs_.at(id).st;
  }

  size_t size() const {
    return jobs_.size();
  }

  size_t done() const {
    return done_;
  }

  bool all_done() const {
    return done_ == jobs_.size();
  }

  size_t queued() const {
    return queue_.size();
  }

  /// Ids of the jobs that are not done, in id order.
  std::vector<uint64_t> unfinished() const;


private:
  struct entry {
    eval_job job;
    state st = state::generating;
    /// Attempts ended by a crash or timeout, and retries after infrastructure failures.
    uint32_t faults = 0;
    uint32_t infra_retries = 0;
    uint32_t version = 1;
  };
  uint32_t max_attempts_;
  uint32_t max_infra_retries_;
  uint64_t next_id_ = 1;
  size_t done_ = 0;
  std::map<uint64_t, entry> jobs_;
  std::deque<uint64_t> queue_;
};

} // namespace bb
