#pragma once

// BackendBench's report files (output.py): OVERALL_SUMMARY.md, full_results.json,
// operator_summary.csv, failed_tests.json, with BackendBench's field names.

#include <filesystem>
#include <string>
#include <vector>

#include "results/scoring.hpp"
#include "messages/records.hpp"

namespace bb {

/// Writes through a temporary and renames, so a reader never sees half a file; "" or why not.
std::string write_file_atomically(const std::filesystem::path& path, const std::string& text);

/// Writes the four report files into `dir` (created if missing). Returns an empty string on
/// success, else what failed and where.
std::string write_reports(const std::string& dir, const std::string& command,
                          const std::vector<eval_result>& results, const scores& s);

/// "N jobs: ok 3, crashed 1, flagged mutates_input 1; 2 runner restarts".
std::string outcome_line(const std::vector<eval_result>& results);

/// An operator as BackendBench's reports name it (op.__name__): "relu.default".
std::string backendbench_op_name(const std::string& op_name);

/// A CSV field quoted as Python's csv module quotes it (minimal quoting).
std::string csv_field(const std::string& text);

} // namespace bb
