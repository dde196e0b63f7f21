#pragma once

// The torchbench suite's inputs: operator traces in BackendBench's text format (a file or a
// folder of them) or a .jsonl of {"op_name", "args", "included_in_benchmark", ...} rows.
// Bad lines are reported with file, line and column and left out; the rest still loads.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "suite/suite.hpp"

#include "suite/printable.hpp"

namespace bb::traces {

/// What loading found besides the suite.
struct load_report {
  suite loaded;
  /// Fatal: nothing could be read (a missing path, an unreadable file, no trace in a folder).
  std::string fatal;
  /// "file:line:column: expected X, found Y" per line that did not parse, left out; bytes
  /// that are not text are escaped (printable).
  std::vector<std::string> errors;
  /// Files read.
  size_t files = 0;
  /// "aten.X.Y: why" per operator left out of the suite (BackendBench's skip list).
  std::vector<std::string> skipped;
  /// Input lines read (every `cnt:` line or .jsonl row that parsed, duplicates included).
  size_t lines = 0;
  /// Rows of a .jsonl left out because included_in_benchmark is false.
  size_t excluded_rows = 0;
  /// Rows left out by included_in_benchmark, per reason of their why_excluded (a row with
  /// several reasons counts under each; "(no reason given)" when it names none).
  std::map<std::string, size_t> excluded_reasons;
  /// Rows left out by included_in_benchmark, per operator.
  std::map<std::string, size_t> excluded_by_op;
  /// Rows left out by --check-overhead-dominated-ops (not marked is_overhead_dominated_op).
  size_t not_overhead_rows = 0;
};

/// Which rows of the data a suite takes.
struct row_filter {
  /// BackendBench's --check-overhead-dominated-ops: only rows marked is_overhead_dominated_op.
  bool overhead_dominated_only = false;
};

/// Accumulates inputs from any number of sources into one suite. Identical (op, args) lines
/// are one input; an operator keeps its inputs in first-seen order. `aten.sum.SymInt` is read
/// as `aten.sum.dim_IntList`.
class trace_loader {
public:
  trace_loader();
  explicit trace_loader(row_filter filter);

  /// Adds trace text ("Operator:" and "cnt:" lines) read from a file named `origin`.
  void add_trace_text(const std::string& text, const std::string& origin);

  /// Adds .jsonl text read from a file named `origin`.
  void add_jsonl_text(const std::string& text, const std::string& origin);

  /// The suite and what was reported while loading.
  load_report finish();

  load_report& report() {
    return out_;
  }

private:
  void error(const std::string& what);
  void add(std::string op_name, const std::string& call_text, const std::string& origin,
           size_t column0);

  load_report out_;
  std::map<std::string, size_t> index_;
  std::set<std::pair<std::string, std::string>> seen_;
  std::set<std::string> skipped_;
  row_filter filter_;
};

/// Loads a trace file, a folder of trace files (every *.txt and *.jsonl below it, in path
/// order) or a .jsonl.
load_report load(const std::string& path, row_filter filter = {});

/// suite/printable.hpp's, for the loader's errors.
using bb::printable;

/// A line of JSON as Python's json module writes it, with its bare NaN, Infinity and
/// -Infinity (outside strings) made null, so a strict parser reads it.
std::string nonfinite_to_null(const std::string& line);

/// The operator names that BackendBench's torchbench suite skips, with the reason.
bool is_skipped_by_backendbench(const std::string& op_name, std::string& why);

/// Orders each operator's inputs largest first by total tensor bytes, ties by the argument
/// text descending (BackendBench's sorted(reverse=True)), and keeps the first `topn` (0 keeps
/// all); correctness and performance inputs are the same list.
void keep_largest(suite& s, size_t topn);

/// As keep_largest, but the N smallest inputs (smallest first): a quick run of every operator
/// with the same kinds of arguments on a small machine.
void keep_smallest(suite& s, size_t topn);

/// What to tell a user who gave no --data.
std::string missing_data_help();

} // namespace bb::traces
