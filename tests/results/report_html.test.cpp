#include <catch2/catch.hpp>

#include <cmath>

#include "results/report_html.hpp"

using namespace bb;

namespace {

eval_result timed(const std::string& op, bool correct, std::vector<double> speedups, uint32_t version = 0) {
  eval_result r;
  r.op_name = op;
  r.version = version;
  for (auto s : speedups) {
    correctness_record c;
    c.is_correct = correct;
    r.correctness.push_back(c);
    performance_record p;
    p.successfully_ran = true;
    p.speedup = s;
    r.performance.push_back(p);
  }
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("an operator's speedup is the geomean of its inputs with a 95% interval", "[results]") {
  auto one = speedup_of(timed("aten.relu.default", true, {2.0}).performance);
  CHECK(one.inputs == 1);
  CHECK(one.geomean == Approx(2.0));
  CHECK(one.low == Approx(2.0));
  auto two = speedup_of(timed("aten.relu.default", true, {1.0, 4.0}).performance);
  CHECK(two.geomean == Approx(2.0));
  // sd of the logs is ln(4)/sqrt(2); the half-width 1.96 * sd / sqrt(2) = 1.96 * ln(4) / 2.
  CHECK(two.high == Approx(std::exp(std::log(2.0) + 1.96 * std::log(4.0) / 2)));
  CHECK(two.low * two.high == Approx(4.0));
  // A failed input counts as 1.0, as in the score.
  auto failed = timed("aten.relu.default", true, {4.0, 4.0});
  failed.performance[1].successfully_ran = false;
  CHECK(speedup_of(failed.performance).geomean == Approx(2.0));
  CHECK(speedup_of({}).inputs == 0);
}

TEST_CASE("report.html holds every operator, the scores, the chart and no outside resource",
          "[results]") {
  report_page page;
  page.command = "bbcluster --suite torchbench --ops <relu>";
  page.ops_total = 3;
  page.results = {timed("aten.relu.default", true, {1.5, 2.5}), timed("aten.add.Tensor", false, {0.5}),
                  timed("aten.mm.default", true, {1.0})};
  page.results[1].detail = "<script>alert(1)</script>";
  auto html = render_report_html(page, "2026-12-04 16:00:00 UTC");
  CHECK_THAT(html, Catch::StartsWith("<!DOCTYPE html>"));
  CHECK_THAT(html, Catch::Contains("2026-12-04 16:00:00 UTC"));
  for (auto op : {"<td>relu.default</td>", "<td>add.Tensor</td>", "<td>mm.default</td>"})
    CHECK(count(html, op) == 1);
  CHECK(count(html, "<g class=\"bar\">") == 3);
  CHECK_THAT(html, Catch::Contains("id=\"speedup-chart\""));
  CHECK_THAT(html, Catch::Contains("id=\"outcome-histogram\""));
  CHECK_THAT(html, Catch::Contains("id=\"score-correctness\">0.67<"));
  // relu is correct and faster than 1.0x; add is faster but wrong; mm is not faster.
  CHECK_THAT(html, Catch::Contains("id=\"score-perf-at-p\">0.33<"));
  CHECK_THAT(html, Catch::Contains("perf@1.0 significant<b id=\"score-perf-at-p-significant\">"));
  // Self-contained: nothing fetched from elsewhere, and kernel text never becomes markup.
  CHECK_THAT(html, !Catch::Contains("src=\"http"));
  CHECK_THAT(html, !Catch::Contains("href=\"http"));
  CHECK_THAT(html, !Catch::Contains("<script>alert"));
  CHECK_THAT(html, Catch::Contains("&lt;relu&gt;"));
  // Running: it reloads itself; finished: it does not.
  CHECK_THAT(html, Catch::Contains("location.reload()"));
  CHECK_THAT(html, Catch::Contains("Running: 3 of 3 operators"));
  CHECK_THAT(html, !Catch::Contains("id=\"not-evaluated\""));
  page.not_evaluated = {{"aten.hardtanh.default", "FlagGems 5.0.2 lacks it"}};
  CHECK_THAT(render_report_html(page, "now"),
             Catch::Contains("1 selected operators were not evaluated, the backend does not implement "
                             "them: hardtanh.default (FlagGems 5.0.2 lacks it)"));
  page.not_evaluated.clear();
  // The sweep's settings, once, when the sweep has them.
  CHECK_THAT(html, !Catch::Contains("id=\"settings\""));
  page.conditions = {{"timing.timer", "adaptive"}, {"evaluator.sandbox", "<off>"}};
  auto with_settings = render_report_html(page, "now");
  CHECK(count(with_settings, "id=\"settings\"") == 1);
  CHECK_THAT(with_settings, Catch::Contains("<tr><td>timing.timer</td><td>adaptive</td></tr>"));
  CHECK_THAT(with_settings, Catch::Contains("<td>&lt;off&gt;</td>"));
  page.conditions.clear();
  page.phase = run_phase::finished;
  CHECK_THAT(render_report_html(page, "now"), !Catch::Contains("location.reload()"));
  page.phase = run_phase::stopped;
  page.resume_command = "bbcluster --resume /runs/a";
  auto stopped = render_report_html(page, "now");
  CHECK_THAT(stopped, Catch::Contains("Partial: the sweep was stopped"));
  CHECK_THAT(stopped, Catch::Contains("bbcluster --resume /runs/a"));
}

TEST_CASE("report.html shows a campaign's versions and which one stands", "[results]") {
  report_page page;
  page.ops_total = 1;
  page.results = {timed("aten.relu.default", true, {1.2}, 2)};
  page.versions["aten.relu.default"] = {timed("aten.relu.default", false, {1.0}, 1),
                                        timed("aten.relu.default", true, {1.2}, 2)};
  auto html = render_report_html(page, "now");
  CHECK_THAT(html, Catch::Contains("<h2>Versions</h2>"));
  CHECK(count(html, "class=\"version\"") == 1);
  CHECK(count(html, "class=\"version stands\"") == 1);
  CHECK_THAT(html, Catch::Contains("v1 incorrect"));
  CHECK_THAT(html, Catch::Contains("v2 correct 1.20x"));
  page.versions.clear();
  CHECK_THAT(render_report_html(page, "now"), !Catch::Contains("<h2>Versions</h2>"));
}

TEST_CASE("report.html's operator table has a flags column, empty for none", "[results]") {
  report_page page;
  page.ops_total = 2;
  page.results = {timed("aten.relu.default", true, {1.5}), timed("aten.add.Tensor", true, {1.2, 1.1})};
  page.results[1].flags = {"suspicious_speedup", "work_off_timed_stream"};
  page.results[1].performance[0].unverified_speedup = 30.0;
  auto html = render_report_html(page, "now");
  CHECK_THAT(html, Catch::Contains("<th data-type=\"text\">flags</th>"));
  CHECK(count(html, "<td class=\"flags\">") == 1); // relu's, empty
  CHECK_THAT(html, Catch::Contains("<td class=\"flags\"></td>"));
  CHECK_THAT(html, Catch::Contains(">suspicious_speedup, work_off_timed_stream</td>"));
  CHECK_THAT(html, Catch::Contains("title=\"input 0: 30.00x at first, 1.20x measured again\""));
  // A row has as many cells as the header has columns.
  auto header = count(html, "<th data-type=");
  auto row_start = html.find("<tr><td>relu.default</td>");
  REQUIRE(row_start != std::string::npos);
  auto row = html.substr(row_start, html.find("</tr>", row_start) - row_start);
  CHECK(count(row, "<td") == header);
}
