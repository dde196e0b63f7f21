#pragma once

// BackendBench's report files (output.py): OVERALL_SUMMARY.md, full_results.json,
// operator_summary.csv, failed_tests.json, with BackendBench's field names.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "results/scoring.hpp"
#include "messages/records.hpp"

namespace bb {

/// Writes through a temporary (`path`.tmp) and renames, so a reader never sees half a file;
/// "" or why not: "cannot write PATH: " and errno's text ("No space left on device"). A
/// temporary that could not be written or renamed is removed.
std::string write_file_atomically(const std::filesystem::path& path, const std::string& text);

/// A report's last version, written when the sweep ends: as write_file_atomically, but when
/// that fails the earlier `path` is removed too (and the error says so), so no version
/// written before the end (one saying "Running") outlives the sweep.
std::string write_final_file(const std::filesystem::path& path, const std::string& text);

/// How complete the reports are: a sweep still running, or one stopped before the end.
struct report_status {
  /// Not every operator is in: the summary says how many are, and how to go on.
  bool partial = false;
  /// Still running (the summary says the reports grow) rather than stopped.
  bool running = false;
  size_t ops_total = 0;
  /// The command that takes a stopped sweep up again.
  std::string resume_command;
  /// Selected operators the backend does not implement, with why (FlagGems lacks it).
  std::map<std::string, std::string> not_evaluated;
  /// The settings the figures depend on (timer, budgets, rounds, checks, cache, device),
  /// stated once in OVERALL_SUMMARY.md; empty: not stated.
  std::map<std::string, std::string> conditions;
};

/// Writes the four report files into `dir` (created if missing), each with write_final_file,
/// every one tried. Returns an empty string on success, else a line per file not written.
std::string write_reports(const std::string& dir, const std::string& command,
                          const std::vector<eval_result>& results, const scores& s,
                          const report_status& status = {});

/// Writes the reports that grow while a sweep runs (operator_summary.csv and
/// OVERALL_SUMMARY.md), each atomically; "" or a line per file not written.
std::string write_growing_reports(const std::string& dir, const std::string& command,
                                  const std::vector<eval_result>& results, const scores& s,
                                  const report_status& status);

/// Writes one operator's record, `<dir>/operators/<op>.json`: its result and, for a
/// generative campaign, every evaluated version; "" or what failed.
std::string write_operator_record(const std::string& dir, const eval_result& r,
                                  const std::vector<eval_result>& versions);

/// "N jobs: ok 3, crashed 1, flagged mutates_input 1; 2 runner restarts".
std::string outcome_line(const std::vector<eval_result>& results);

/// An operator as BackendBench's reports name it (op.__name__): "relu.default".
std::string backendbench_op_name(const std::string& op_name);

/// A CSV field quoted as Python's csv module quotes it (minimal quoting).
std::string csv_field(const std::string& text);

} // namespace bb
