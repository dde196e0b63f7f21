#include "results/scoring.hpp"

#include "suite/args.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace bb {

double geomean(const std::vector<double>& xs) {
  if (xs.empty())
    return 1.0;
  double sum = 0.0;
  for (auto x : xs)
    sum += std::log(x);
  return std::exp(sum / static_cast<double>(xs.size()));
}

bool is_unscorable(const correctness_record& c) {
  return is_skipped(input_outcome(c));
}

bool is_unscorable(const performance_record& p) {
  return is_skipped(input_outcome(p));
}

op_score score_op(const std::string& op_name, const std::vector<correctness_record>& correctness,
                  const std::vector<performance_record>& performance) {
  op_score s;
  s.op_name = op_name;
  size_t unscorable = 0;
  for (auto& c : correctness) {
    if (is_unscorable(c)) {
      if (s.skip_reason.empty())
        s.skip_reason = c.error_type + ": " + c.error_msg;
      ++unscorable;
      continue;
    }
    ++s.correctness_inputs;
    if (c.is_correct)
      ++s.passed_inputs;
  }
  s.skipped = unscorable > 0 && s.correctness_inputs == 0;
  s.correct = s.correctness_inputs > 0 && s.passed_inputs == s.correctness_inputs;
  std::vector<double> speedups, lows, highs;
  bool intervals = true;
  for (auto& p : performance)
    if (!is_unscorable(p)) {
      bool ran = p.successfully_ran && p.speedup > 0.0;
      speedups.push_back(ran ? p.speedup : 1.0);
      intervals = intervals && ran && p.speedup_ci_low > 0.0 && p.speedup_ci_high > 0.0;
      lows.push_back(p.speedup_ci_low);
      highs.push_back(p.speedup_ci_high);
    }
  s.performance = geomean(speedups);
  if (intervals && !speedups.empty()) {
    s.performance_low = geomean(lows);
    s.performance_high = geomean(highs);
  }
  if (!s.skipped)
    s.skip_reason.clear();
  return s;
}

op_score score_result(const eval_result& r) {
  auto s = score_op(r.op_name, r.correctness, r.performance);
  if (is_skipped(r.outcome)) {
    s.skipped = true;
    s.correct = false;
    s.skip_reason = r.outcome == outcome::needs_cuda ? "needs_cuda: " + r.detail
                    : r.detail.empty()                ? std::string(to_string(r.outcome))
                                                      : r.detail;
  }
  return s;
}

scores score_results(const std::vector<eval_result>& results, double p) {
  scores out;
  out.p = p;
  std::vector<double> perfs;
  size_t correct = 0;
  size_t fast = 0;
  size_t significant = 0;
  for (auto& r : results) {
    auto s = score_result(r);
    if (s.skipped) {
      ++out.skipped;
    } else {
      correct += s.correct ? 1 : 0;
      fast += s.correct && s.performance > p ? 1 : 0;
      significant += s.correct && s.performance_low > p ? 1 : 0;
      perfs.push_back(s.performance);
    }
    out.ops.push_back(std::move(s));
  }
  if (!perfs.empty()) {
    auto n = static_cast<double>(perfs.size());
    out.correctness = static_cast<double>(correct) / n;
    out.perf_at_p = static_cast<double>(fast) / n;
    out.perf_at_p_significant = static_cast<double>(significant) / n;
  }
  out.performance = geomean(perfs);
  return out;
}

std::string python_float(double x) {
  return args::python_repr(x);
}

std::string format_scores(const scores& s) {
  char buf[768];
  auto p = python_float(s.p);
  std::snprintf(buf, sizeof(buf),
                "correctness score (mean pass rate over all operators): %.2f\n"
                "performance score (geomean speedup over all operators): %.2f\n"
                "perf@p score (rate of correct samples with a speedup greater than p, p=%s): "
                "%.2f\n"
                "perf@p significant (rate of correct samples whose speedup's 95%% interval lies "
                "above p, p=%s): %.2f\n",
                s.correctness, s.performance, p.c_str(), s.perf_at_p, p.c_str(),
                s.perf_at_p_significant);
  return buf;
}

} // namespace bb

namespace bb {

std::string format_skipped(const scores& s) {
  if (s.skipped == 0)
    return "";
  std::string out = std::to_string(s.skipped) + " of " + std::to_string(s.ops.size())
                    + " operators skipped (no input could run here; left out of the scores):\n";
  for (auto& op : s.ops)
    if (op.skipped) {
      auto why = op.skip_reason.substr(0, op.skip_reason.find('\n'));
      if (why.size() > 160)
        why = why.substr(0, 157) + "...";
      out += "  " + op.op_name + ": " + why + "\n";
    }
  return out;
}

std::string summarize(const eval_result& r) {
  if (r.outcome != outcome::ok)
    return to_string(r.outcome) + (r.detail.empty() ? "" : ": " + r.detail);
  auto s = score_result(r);
  if (s.skipped)
    return "skipped: " + s.skip_reason.substr(0, s.skip_reason.find('\n'));
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%zu/%zu correct, speedup %.2fx", s.passed_inputs,
                s.correctness_inputs, s.performance);
  return buf;
}

} // namespace bb
