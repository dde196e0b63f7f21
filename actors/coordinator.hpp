#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/job_table.hpp"
#include "suite/suite.hpp"
#include "messages/types.hpp"

namespace bb {

struct coordinator_config {
  suite work;
  uint32_t max_attempts = 2;
  /// Bound on one evaluate request; past it the evaluator counts as lost.
  caf::timespan evaluate_timeout = std::chrono::hours(1);
  /// Bound on one generator request (a generative backend bounds its own work).
  caf::timespan generate_timeout = std::chrono::minutes(10);
  /// The generator writes kernel versions (v1, v2, ...): results carry their version.
  bool numbered_versions = false;
  /// The first version of an operator whose earlier versions a resumed campaign evaluated.
  std::map<std::string, uint32_t> first_versions;
  /// Shards per slot (scheduler.shards_per_slot): each operator is cut into shards of about
  /// the sweep's expected work per slot divided by this, and queued shards are cut further
  /// as the queue drains (docs/architecture.md, "Shards"); 0: one job per operator.
  double shards_per_slot = 0.0;
  /// The longest a shard's expected work may be (scheduler.max_shard_s), one slot included;
  /// 0: no bound.
  double max_shard_seconds = 0.0;
  /// Each operator's expected work per input (suite/shards.hpp), by name; an operator
  /// without an estimate counts one second per input.
  std::map<std::string, op_work> estimates;
  /// Shards a resumed sweep finished before, per operator (one kernel per operator only).
  std::map<std::string, std::vector<eval_result>> earlier_shards;
  /// The sweep's settings (pack_settings), stamped on every job so that evaluators on nodes
  /// time and check as local ones do; empty: each evaluator's own.
  std::string job_settings;
  /// Stamped on every job as its stream_tag: "" streams nothing (a served request's key
  /// streams each input's records to the server as it ends).
  std::string stream_tag;
};

caf::error validate(const coordinator_config& cfg);

struct coordinator_state {
  static inline const char* name = "coordinator";
  explicit coordinator_state() : table(1) {
  }
  coordinator_config cfg;
  job_table table;
  generator_actor generator;
  reporter_actor reporter;
  /// Builds native artefacts; may be null (no native kernels in this sweep).
  compile_pool_actor compiler;
  std::vector<evaluator_actor> idle;
  /// The job each busy evaluator is running.
  std::map<caf::actor_addr, eval_job> busy;
  size_t evaluators_alive = 0;
  bool started = false;
  /// The reports were asked for: later events change nothing.
  bool finished = false;
  /// Told to stop: nothing more is dispatched; the reports are partial.
  bool stopping = false;
  caf::typed_response_promise<sweep_report> promise;
  /// The sweep's pace (sweep_report): when `run` came, the process's CPU seconds then, jobs
  /// dispatched and messages handled since.
  std::chrono::steady_clock::time_point started_at;
  double cpu_at_start = 0.0;
  uint64_t dispatched = 0;
  uint64_t messages = 0;
};

using coordinator_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

/// Splits the suite into jobs (one per operator, or its shards), asks the generator for each
/// kernel, has native kernels built by the compile pool (once per version), hands jobs to
/// idle evaluators longest expected work first and retries runner faults per job. Once every
/// shard of an operator's version is terminal, its merged result goes back to the generator,
/// which makes it final (sent to the reporter) or writes the next version. Answers `run` once
/// every operator is terminal and the reports are written.
coordinator_actor::behavior_type coordinator(coordinator_pointer self, coordinator_config cfg,
                                             generator_actor generator,
                                             std::vector<evaluator_actor> evaluators,
                                             reporter_actor reporter,
                                             compile_pool_actor compiler);

} // namespace bb
