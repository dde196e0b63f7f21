#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/report_pace.hpp"
#include "results/journal.hpp"
#include "results/profile.hpp"
#include "results/progress_board.hpp"
#include "messages/types.hpp"

namespace bb {

struct reporter_config {
  /// Run folder for the reports and the journal; empty: write nothing.
  std::string log_dir;
  /// The command line, for OVERALL_SUMMARY.md.
  std::string command;
  double p = 1.0;
  /// Jobs the sweep will report, for progress lines.
  uint64_t expected_jobs = 0;
  /// Results a resumed sweep's journal already holds: counted and reported, not journaled
  /// again.
  std::vector<eval_result> previous;
  /// Evaluated versions a resumed campaign's journal already holds, per operator.
  std::map<std::string, std::vector<eval_result>> previous_versions;
  /// Told of each finished operator; may be null.
  std::shared_ptr<progress_board> board;
  /// The kernels' folder, for report.html's links; empty: none.
  std::string kernel_dir;
  /// Seconds between report.html's reloads while the sweep runs.
  int reload_s = 10;
  /// Seconds at least between rewrites of the growing reports (more when a rewrite takes
  /// long: actors/report_pace.hpp); 0: after every operator.
  double reports_interval_s = 2.0;
  /// Selected operators the backend does not implement, with why: listed, not scored.
  std::map<std::string, std::string> not_evaluated;
  /// The settings the figures depend on, stated once in OVERALL_SUMMARY.md.
  std::map<std::string, std::string> conditions;
  /// Called with each operator's terminal result once it is journaled, on the reporter's
  /// thread (`bbcluster serve` streams it to the request's client); may be empty.
  std::function<void(const eval_result&)> on_result;
};

caf::error validate(const reporter_config& cfg);

struct reporter_state {
  static inline const char* name = "reporter";
  reporter_config cfg;
  std::vector<eval_result> results;
  journal_writer journal;
  uint64_t failed_jobs = 0;
  /// Every evaluated version of a generative campaign, per operator.
  std::map<std::string, std::vector<eval_result>> versions;
  /// Where the evaluations' time went: each job's phases under its slot (a sharded
  /// operator's shards one by one, not their merged result); and the reporter's own load.
  sweep_profile profile;
  /// When the growing reports are rewritten next.
  report_pace pace{report_pace::clock::duration::zero()};
  /// The final reports are written (finish or stop): nothing rewrites them as growing.
  bool closed = false;
};

using reporter_pointer = reporter_actor::stateful_pointer<reporter_state>;

/// Journals each result as it arrives (an operator's, and each shard's of a sharded one), logs
/// it and writes the operator's record; rewrites the growing reports (operator_summary.csv,
/// OVERALL_SUMMARY.md, report.html) at the pace of `report_pace`, a tick to itself flushing
/// the last change; writes every report on finish, or marked partial on stop. Spawned
/// detached: its rewrites take no thread of the shared scheduler, and its CPU time (in the
/// profile) is its own thread's.
reporter_actor::behavior_type reporter(reporter_pointer self, reporter_config cfg);

} // namespace bb
