#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "results/reports.hpp"
#include "results/results.hpp"
#include "results/scoring.hpp"
#include "support.hpp"

using namespace bb;
using nlohmann::json;

namespace {

std::vector<eval_result> sample_results() {
  eval_result ok;
  ok.op_name = "aten.relu.default";
  correctness_record c;
  c.op_name = ok.op_name;
  c.args = "((T([2], f32),), {})";
  c.is_correct = true;
  ok.correctness.push_back(c);
  performance_record p;
  p.op_name = ok.op_name;
  p.args = "((T([1024, 1024], f32),), {})";
  p.speedup = 2.0;
  p.benchmark_time_ms = 0.1;
  p.reference_time_ms = 0.2;
  p.successfully_ran = true;
  ok.performance.push_back(p);
  eval_job job;
  job.job_id = 2;
  job.attempt = 2;
  job.op_name = "aten.add.Tensor";
  job.correctness_inputs = {"((T([3], f32), T([3], f32),), {})"};
  job.performance_inputs = {"((T([9], f32), T([9], f32),), {})"};
  auto crashed = failed_result(job, outcome::crashed, "runner killed by signal 11 (SIGSEGV)");
  return {ok, crashed};
}

// OVERALL_SUMMARY.md as write_reports writes it for `results` (scored at p = 1).
std::string summary_of(const std::vector<eval_result>& results) {
  test::temp_dir dir;
  REQUIRE(write_reports(dir.path, "bbcluster", results, score_results(results, 1.0)) == "");
  return test::read_file(dir / "OVERALL_SUMMARY.md");
}

} // namespace

TEST_CASE("failed_result gives every input a failed record", "[results]") {
  auto r = sample_results()[1];
  CHECK(r.outcome == bb::outcome::crashed);
  REQUIRE(r.correctness.size() == 1);
  CHECK_FALSE(r.correctness[0].is_correct);
  CHECK(r.correctness[0].error_type == "crashed");
  REQUIRE(r.performance.size() == 1);
  CHECK_FALSE(r.performance[0].successfully_ran);
  CHECK(r.performance[0].speedup == 1.0);
}

TEST_CASE("the four report files carry BackendBench's fields", "[results]") {
  test::temp_dir dir;
  auto results = sample_results();
  auto s = score_results(results, 1.0);
  REQUIRE(write_reports(dir.path, "bbcluster --suite smoke", results, s) == "");

  auto full = json::parse(test::read_file(dir / "full_results.json"));
  REQUIRE(full.size() == 4);
  // Sorted by (op_name, args): add's two records first.
  // Operators as BackendBench names them (op.__name__).
  CHECK(full[0]["op_name"] == "add.Tensor");
  json correctness, performance;
  for (auto& row : full)
    (row["test_type"] == "correctness" ? correctness : performance) = row;
  for (const char* key : {"op_name", "args", "is_correct", "error_msg", "error_type", "traceback",
                          "max_abs_error", "max_rel_error", "test_type"})
    CHECK(correctness.contains(key));
  for (const char* key : {"op_name", "args", "speedup", "benchmark_time_ms", "reference_time_ms",
                          "error_msg", "successfully_ran", "test_type"})
    CHECK(performance.contains(key));

  auto failed = json::parse(test::read_file(dir / "failed_tests.json"));
  REQUIRE(failed.size() == 2);
  CHECK(failed[0]["op_name"] == "add.Tensor");
  CHECK(failed[1]["op_name"] == "add.Tensor");
  // A failed input's speedup and kernel time are None, as BackendBench records them.
  for (auto& row : failed)
    if (row["test_type"] == "performance") {
      CHECK(row["speedup"].is_null());
      CHECK(row["benchmark_time_ms"].is_null());
    }

  auto csv = test::read_file(dir / "operator_summary.csv");
  CHECK(csv.rfind("operator,total_tests,correctness_tests,performance_tests,"
                  "passed_correctness_tests,passed_performance_tests,failed_correctness_tests,"
                  "failed_performance_tests,correctness_rate,avg_speedup,geomean_speedup,"
                  "max_absolute_error,max_relative_error\r\n",
                  0)
        == 0);
  CHECK(csv.find("\nrelu.default,2,1,1,1,1,0,0,1.0,2.0,2.0,0.0,0.0\r\n") != std::string::npos);
  CHECK(csv.find("\nadd.Tensor,2,1,1,0,0,1,1,0.0,0.0,0.0,0.0,0.0\r\n") != std::string::npos);

  auto md = test::read_file(dir / "OVERALL_SUMMARY.md");
  CHECK(md.find("bbcluster --suite smoke") != std::string::npos);
  CHECK(md.find("| Correctness Score | 0.50 |") != std::string::npos);
  CHECK(md.find("| Perf@1.0 Score | 0.50 |") != std::string::npos);
  CHECK(md.find("| relu.default | 100.0000% | 2.0000x|") != std::string::npos);
}

TEST_CASE("CSV fields are quoted as Python's csv module quotes them", "[results]") {
  CHECK(csv_field("plain") == "plain");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
}

TEST_CASE("operators the backend does not implement are named in the summary, not scored", "[results]") {
  test::temp_dir dir;
  auto results = sample_results();
  auto s = score_results(results, 1.0);
  report_status status;
  status.not_evaluated = {{"aten.hardtanh.default", "FlagGems 5.0.2 lacks it"}};
  REQUIRE(write_reports(dir.path, "bbcluster --backend flag_gems", results, s, status) == "");
  auto md = test::read_file(dir / "OVERALL_SUMMARY.md");
  CHECK(md.find("## Not Evaluated") != std::string::npos);
  CHECK(md.find("| hardtanh.default | FlagGems 5.0.2 lacks it |") != std::string::npos);
  CHECK(md.find("| Correctness Score | 0.50 |") != std::string::npos);
  auto csv = test::read_file(dir / "operator_summary.csv");
  CHECK(csv.find("hardtanh") == std::string::npos);
  test::temp_dir plain;
  REQUIRE(write_reports(plain.path, "bbcluster", results, s) == "");
  CHECK(test::read_file(plain / "OVERALL_SUMMARY.md").find("Not Evaluated") == std::string::npos);
}

TEST_CASE("the summary states the sweep's settings once, after its command", "[results]") {
  test::temp_dir dir;
  auto results = sample_results();
  auto s = score_results(results, 1.0);
  report_status status;
  status.conditions = {{"timing.timer", "adaptive"}, {"timing.rounds", "3"}, {"timing.reference_cache", "off"}};
  REQUIRE(write_reports(dir.path, "bbcluster --timer adaptive", results, s, status) == "");
  auto md = test::read_file(dir / "OVERALL_SUMMARY.md");
  auto settings = md.find("## Settings");
  REQUIRE(settings != std::string::npos);
  CHECK(settings > md.find("## Command"));
  CHECK(settings < md.find("## Results"));
  CHECK(md.find("| timing.timer | adaptive |") != std::string::npos);
  CHECK(md.find("| timing.rounds | 3 |") != std::string::npos);
  CHECK(md.find("| timing.reference_cache | off |") != std::string::npos);
  CHECK(md.find("## Settings", settings + 1) == std::string::npos);
  // Without them (a report written outside a sweep), no section.
  test::temp_dir plain;
  REQUIRE(write_reports(plain.path, "bbcluster", results, s) == "");
  CHECK(test::read_file(plain / "OVERALL_SUMMARY.md").find("## Settings") == std::string::npos);
}

TEST_CASE("the summary says how many reference times were calibrated against the cache", "[results]") {
  auto results = sample_results();
  CHECK(summary_of(results).find("## Reference Times") == std::string::npos);

  size_t timed = 0;
  for (auto& r : results)
    for (auto& p : r.performance)
      timed += p.successfully_ran ? 1 : 0;
  REQUIRE(timed >= 1);
  auto& p = results[0].performance[0];
  REQUIRE(p.successfully_ran);
  p.reference_cached = true;
  p.reference_drift = -0.08;
  auto md = summary_of(results);
  CHECK(md.find("## Reference Times\n\n1 of " + std::to_string(timed) + " timed inputs had a reference time in the "
                "reference-time cache") != std::string::npos);
  CHECK(md.find("The calibrations lay 8.0% from the cached figures at the median, 8.0% at most; 1 lay more than "
                "5% off") != std::string::npos);
}

TEST_CASE("the summary lists every flag per operator and each speedup measured again", "[results]") {
  auto results = sample_results();
  CHECK(summary_of(results).find("## Flags") == std::string::npos);

  results[0].flags = {"work_off_timed_stream", "suspicious_speedup"};
  auto& p = results[0].performance[0];
  p.unverified_speedup = 40.0;
  p.speedup = 1.25;
  p.timer = "synchronized";
  results[1].flags = {"replaces_timer"};
  auto s = score_results(results, 1.0);
  test::temp_dir flagged;
  REQUIRE(write_reports(flagged.path, "bbcluster", results, s) == "");
  auto md = test::read_file(flagged / "OVERALL_SUMMARY.md");
  CHECK(md.find("## Flags") != std::string::npos);
  CHECK(md.find("| relu.default | suspicious_speedup, work_off_timed_stream |") != std::string::npos);
  CHECK(md.find("| add.Tensor | replaces_timer |") != std::string::npos);
  CHECK(md.find("| relu.default | ((T([1024, 1024], f32),), {}) | 40.0000x | 1.2500x |")
        != std::string::npos);
  // The flags are counted in the jobs line as before.
  CHECK(md.find("flagged replaces_timer 1") != std::string::npos);

  // full_results.json carries the two new fields beside BackendBench's; the cache's round
  // means stay out; operator_summary.csv keeps its columns, the counted speedup in them.
  auto full = json::parse(test::read_file(flagged / "full_results.json"));
  bool seen = false;
  for (auto& row : full)
    if (row["test_type"] == "performance" && row["op_name"] == "relu.default") {
      seen = true;
      CHECK(row["unverified_speedup"] == 40.0);
      CHECK(row["timer"] == "synchronized");
      CHECK(row["speedup"] == 1.25);
      CHECK_FALSE(row.contains("reference_round_means_ms"));
    }
  CHECK(seen);
  auto csv = test::read_file(flagged / "operator_summary.csv");
  CHECK(csv.find("\nrelu.default,2,1,1,1,1,0,0,1.0,1.25,1.25,0.0,0.0\r\n") != std::string::npos);
  CHECK(csv.find("flag") == std::string::npos);
}

TEST_CASE("a write that fails names the file and errno's text and leaves no .tmp", "[results]") {
  test::temp_dir dir;
  auto path = dir / "full_results.json";
  std::string err;
  {
    test::file_size_limit limit(1000);
    err = write_file_atomically(path, std::string(5000, 'x'));
  }
  CHECK(err == "cannot write " + path + ": File too large");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(write_file_atomically(dir / "missing/folder/x.json", "{}")
        == "cannot write " + dir / "missing/folder/x.json" + ": No such file or directory");
  CHECK(write_file_atomically(path, "{}\n").empty());
  CHECK(test::read_file(path) == "{}\n");
}

TEST_CASE("a final write that fails removes the version written while running", "[results]") {
  test::temp_dir dir;
  auto path = dir / "OVERALL_SUMMARY.md";
  test::write_file(path, "# BackendBench Run Summary\n\n## Running\n\n");
  std::string err;
  {
    test::file_size_limit limit(100);
    err = write_final_file(path, std::string(500, 'x'));
  }
  CHECK(err == "cannot write " + path + ": File too large (its earlier version, written before "
                                        "the end, removed)");
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(write_final_file(path, "done\n").empty());
  CHECK(test::read_file(path) == "done\n");
}

TEST_CASE("write_reports tries every file and names each one it could not write", "[results]") {
  test::temp_dir dir;
  auto results = sample_results();
  auto s = score_results(results, 1.0);
  report_status running{true, true, 2, "", {}, {}};
  REQUIRE(write_growing_reports(dir.path, "bbcluster", results, s, running).empty());
  REQUIRE(test::read_file(dir / "OVERALL_SUMMARY.md").find("## Running") != std::string::npos);
  std::string err;
  {
    test::file_size_limit limit(64);
    err = write_reports(dir.path, "bbcluster", results, s);
  }
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "cannot write " + dir / "full_results.json" + ": File too large");
  CHECK(lines[1] == "cannot write " + dir / "failed_tests.json" + ": File too large");
  CHECK_THAT(lines[2], Catch::StartsWith("cannot write " + dir / "operator_summary.csv"));
  CHECK_THAT(lines[3], Catch::StartsWith("cannot write " + dir / "OVERALL_SUMMARY.md"));
  CHECK_THAT(lines[3], Catch::EndsWith("removed)"));
  // No report says "Running" after the end, and no temporary is left.
  for (auto& e : std::filesystem::directory_iterator(dir.path)) {
    INFO(e.path());
    CHECK(e.path().extension() != ".tmp");
    CHECK(test::read_file(e.path()).find("Running") == std::string::npos);
  }
}
