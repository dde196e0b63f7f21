#pragma once

// What a sweep will run: the suite named on the command line, loaded, filtered with --ops and
// cut to --topn, with everything worth telling the user on the way. No actors here.

#include <cstddef>
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
};

struct sweep_plan {
  suite work;
  /// Why nothing can run (no --data, unreadable data); empty when the plan is usable.
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
};

/// Loads and selects the suite of `req`.
sweep_plan make_plan(const plan_request& req);

/// The --list table: operator, number of inputs, and its schema or "unsupported op" (schemas
/// as the runner resolved them, in suite order; empty for an op this torch lacks).
std::string format_op_list(const suite& s, const std::vector<std::string>& schemas);

} // namespace bb
