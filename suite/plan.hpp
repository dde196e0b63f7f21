#pragma once

// What a sweep will run: the suite named on the command line, loaded, filtered with --ops and
// cut to --topn, with everything worth telling the user on the way. No actors here.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "suite/suite.hpp"

namespace bb {

struct plan_request {
  /// "smoke" or "torchbench".
  std::string suite_name = "smoke";
  /// --data: trace file, folder or .jsonl (torchbench).
  std::string data;
  /// --ops tokens.
  std::vector<std::string> ops;
  /// --topn; 0 keeps every input.
  size_t topn = 0;
  /// --smallest-inputs: keep the N smallest inputs instead of the N largest.
  bool smallest = false;
  /// --check-overhead-dominated-ops (torchbench).
  bool overhead_dominated_only = false;
};

struct sweep_plan {
  suite work;
  /// Why nothing can run (no --data, unreadable data, no operator selected: empty or junk
  /// data, --ops matching nothing); empty when the plan is usable.
  std::string fatal;
  /// Lines that did not parse ("file:line:column: ..."), left out.
  std::vector<std::string> input_errors;
  /// Operators left out before evaluation, with the reason.
  std::vector<std::string> skipped_ops;
  /// --ops tokens that matched nothing, with the closest names.
  std::vector<std::string> warnings;
  /// Input lines read and rows excluded by included_in_benchmark.
  size_t lines = 0;
  size_t excluded_rows = 0;
  /// Rows left out by included_in_benchmark, per why_excluded reason and per operator.
  std::map<std::string, size_t> excluded_reasons;
  std::map<std::string, size_t> excluded_by_op;
  /// Operators (selected by --ops) whose rows are all left out, with their row counts.
  std::vector<std::pair<std::string, size_t>> wholly_excluded;
  /// Rows left out by --check-overhead-dominated-ops.
  size_t not_overhead_rows = 0;
};

/// Loads and selects the suite of `req`.
sweep_plan make_plan(const plan_request& req);

/// The --list table: operator, number of inputs, and its schema or "unsupported op" (schemas
/// as the runner resolved them, in suite order; empty for an op this torch lacks).
std::string format_op_list(const suite& s, const std::vector<std::string>& schemas);

/// What --list adds after the table: the operators the suite leaves out with why, and for
/// data with included_in_benchmark the rows left out per why_excluded reason and the
/// operators of the data none of whose rows are included. Empty when nothing was left out.
std::string format_exclusions(const sweep_plan& plan);

} // namespace bb
