#include <catch2/catch.hpp>

#include <cmath>

#include "results/scoring.hpp"

using namespace bb;

namespace {

correctness_record corr(bool ok) {
  correctness_record c;
  c.op_name = "aten.x.default";
  c.is_correct = ok;
  return c;
}

performance_record perf(double speedup, bool ran = true) {
  performance_record p;
  p.op_name = "aten.x.default";
  p.speedup = speedup;
  p.successfully_ran = ran;
  return p;
}

eval_result result(const std::string& op, std::vector<correctness_record> c,
                   std::vector<performance_record> p) {
  eval_result r;
  r.op_name = op;
  r.correctness = std::move(c);
  r.performance = std::move(p);
  return r;
}

} // namespace

TEST_CASE("geomean", "[results]") {
  CHECK(geomean({2.0, 8.0}) == Approx(4.0));
  CHECK(geomean({}) == 1.0);
}

TEST_CASE("an op is correct only when every correctness input passes", "[results]") {
  CHECK(score_op("a", {corr(true), corr(true)}, {}).correct);
  CHECK_FALSE(score_op("a", {corr(true), corr(false)}, {}).correct);
  CHECK_FALSE(score_op("a", {}, {}).correct);
}

TEST_CASE("a failed performance input counts as speedup 1.0", "[results]") {
  auto s = score_op("a", {corr(true)}, {perf(4.0), perf(100.0, false)});
  CHECK(s.performance == Approx(2.0));
}

TEST_CASE("scores over operators: mean correctness, geomean performance, perf@p", "[results]") {
  std::vector<eval_result> rs = {
    result("a", {corr(true)}, {perf(2.0)}),
    result("b", {corr(true)}, {perf(0.5)}),
    result("c", {corr(false)}, {perf(8.0)}),
    result("d", {}, {}),
  };
  auto s = score_results(rs, 1.0);
  CHECK(s.correctness == Approx(0.5));
  CHECK(s.performance == Approx(std::pow(2.0 * 0.5 * 8.0 * 1.0, 0.25)));
  // c is faster but incorrect: it does not count.
  CHECK(s.perf_at_p == Approx(0.25));
  auto strict = score_results(rs, 2.0);
  CHECK(strict.perf_at_p == 0.0);
}

TEST_CASE("the three score lines as BackendBench prints them, then perf@p significant", "[results]") {
  auto s = score_results({result("a", {corr(true)}, {perf(1.0)})}, 1.0);
  CHECK(format_scores(s) == "correctness score (mean pass rate over all operators): 1.00\n"
                            "performance score (geomean speedup over all operators): 1.00\n"
                            "perf@p score (rate of correct samples with a speedup greater than "
                            "p, p=1.0): 0.00\n"
                            "perf@p significant (rate of correct samples whose speedup's 95% "
                            "interval lies above p, p=1.0): 0.00\n");
  CHECK(python_float(1.5) == "1.5");
  CHECK(python_float(0.1) == "0.1");
  CHECK(python_float(2.0) == "2.0");
}

TEST_CASE("perf@p significant counts a speedup only when its interval lies above p", "[results]") {
  auto timed = [](double s, double lo, double hi) {
    auto p = perf(s);
    p.speedup_ci_low = lo;
    p.speedup_ci_high = hi;
    p.timing_rounds = 5;
    return p;
  };
  std::vector<eval_result> rs = {
    result("sure", {corr(true)}, {timed(1.5, 1.3, 1.7)}),
    result("maybe", {corr(true)}, {timed(1.1, 0.95, 1.25)}),
    result("wrong", {corr(false)}, {timed(2.0, 1.9, 2.1)}),
    result("untimed", {corr(true)}, {perf(1.4)}),
  };
  auto s = score_results(rs, 1.0);
  CHECK(s.perf_at_p == Approx(0.75));
  CHECK(s.perf_at_p_significant == Approx(0.25));
  CHECK(s.ops[0].performance_low == Approx(1.3));
  CHECK(s.ops[0].performance_high == Approx(1.7));
  CHECK(s.ops[3].performance_low == 0.0);
}
