#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "results/journal.hpp"
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
};

caf::error validate(const reporter_config& cfg);

struct reporter_state {
  static inline const char* name = "reporter";
  reporter_config cfg;
  std::vector<eval_result> results;
  journal_writer journal;
  uint64_t failed_jobs = 0;
};

using reporter_pointer = reporter_actor::stateful_pointer<reporter_state>;

/// Journals each result as it arrives, logs progress, and writes the reports on finish.
reporter_actor::behavior_type reporter(reporter_pointer self, reporter_config cfg);

} // namespace bb
