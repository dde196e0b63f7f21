#pragma once

// The scores (docs/architecture.md, "Scores"), computed from job results.

#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// One operator's verdict.
struct op_score {
  std::string op_name;
  /// All correctness inputs passed (and there was at least one).
  bool correct = false;
  /// Geomean of the performance inputs' speedups, a failed input counting as 1.0.
  double performance = 1.0;
  /// A 95% interval around `performance`: the geomeans of the inputs' interval bounds (wider
  /// than the geomean's own interval, so a claim made from it is conservative). Both 0 when an
  /// input has no interval (a failed input, or fewer than two timing rounds).
  double performance_low = 0.0;
  double performance_high = 0.0;
  size_t correctness_inputs = 0;
  size_t passed_inputs = 0;
  /// No input could run here (the reference rejected every one, or the op is not in this
  /// torch): the op is listed but left out of the scores.
  bool skipped = false;
  /// Why, when skipped: the first input's reason.
  std::string skip_reason;
};

struct scores {
  /// Mean over operators of correct.
  double correctness = 0.0;
  /// Geomean over operators of their performance.
  double performance = 1.0;
  /// Share of operators that are correct and faster than p.
  double perf_at_p = 0.0;
  /// Share of operators that are correct and whose speedup's interval lies above p.
  double perf_at_p_significant = 0.0;
  double p = 1.0;
  /// Every operator, skipped ones included.
  std::vector<op_score> ops;
  /// Operators left out of the scores.
  size_t skipped = 0;
};

/// True for a record that says nothing about the kernel: the input could not run on this
/// device (reference_error) or cannot be built here (unsupported). Left out of scores.
bool is_unscorable(const correctness_record& c);
bool is_unscorable(const performance_record& p);

/// Geometric mean; 1.0 for an empty list (no evidence of a speedup either way).
double geomean(const std::vector<double>& xs);

/// Scores one operator from its records, leaving unscorable inputs out.
op_score score_op(const std::string& op_name, const std::vector<correctness_record>& correctness,
                  const std::vector<performance_record>& performance);

/// Scores one job's result: an op the runner could not resolve (outcome unsupported) or whose
/// every input is unscorable is skipped.
op_score score_result(const eval_result& r);

/// Scores a sweep: one op_score per result, in order; skipped ops are left out of the three
/// scores.
scores score_results(const std::vector<eval_result>& results, double p);

/// One operator's result in a line: "3/3 correct, speedup 1.52x", "skipped: why" or the
/// outcome with its detail.
std::string summarize(const eval_result& r);

/// A double as Python's repr writes it: 1.0, 1.5, 0.1.
std::string python_float(double x);

/// The three lines BackendBench prints, two decimals each, and a fourth: perf@p counting only
/// speedups whose 95% interval lies above p.
std::string format_scores(const scores& s);

/// The lines after the scores naming the skipped operators and why; empty when none.
std::string format_skipped(const scores& s);

} // namespace bb
