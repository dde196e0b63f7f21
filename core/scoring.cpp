#include "core/scoring.hpp"

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

op_score score_op(const std::string& op_name, const std::vector<correctness_record>& correctness,
                  const std::vector<performance_record>& performance) {
  op_score s;
  s.op_name = op_name;
  s.correctness_inputs = correctness.size();
  for (auto& c : correctness)
    if (c.is_correct)
      ++s.passed_inputs;
  s.correct = !correctness.empty() && s.passed_inputs == correctness.size();
  std::vector<double> speedups;
  for (auto& p : performance)
    speedups.push_back(p.successfully_ran && p.speedup > 0.0 ? p.speedup : 1.0);
  s.performance = geomean(speedups);
  return s;
}

scores score_results(const std::vector<eval_result>& results, double p) {
  scores out;
  out.p = p;
  std::vector<double> perfs;
  size_t correct = 0;
  size_t fast = 0;
  for (auto& r : results) {
    auto s = score_op(r.op_name, r.correctness, r.performance);
    correct += s.correct ? 1 : 0;
    fast += s.correct && s.performance > p ? 1 : 0;
    perfs.push_back(s.performance);
    out.ops.push_back(std::move(s));
  }
  if (!results.empty()) {
    auto n = static_cast<double>(results.size());
    out.correctness = static_cast<double>(correct) / n;
    out.perf_at_p = static_cast<double>(fast) / n;
  }
  out.performance = geomean(perfs);
  return out;
}

std::string python_float(double x) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x)
      break;
  }
  std::string out = buf;
  if (out.find_first_of(".einf") == std::string::npos)
    out += ".0";
  return out;
}

std::string format_scores(const scores& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "correctness score (mean pass rate over all operators): %.2f\n"
                "performance score (geomean speedup over all operators): %.2f\n"
                "perf@p score (rate of correct samples with a speedup greater than p, p=%s): "
                "%.2f\n",
                s.correctness, s.performance, python_float(s.p).c_str(), s.perf_at_p);
  return buf;
}

} // namespace bb
