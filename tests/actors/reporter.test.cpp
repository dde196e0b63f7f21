#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <nlohmann/json.hpp>

#include "actors/reporter.hpp"
#include "results/results.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A reporter writing into `dir`, expecting `jobs` results.
reporter_config config_for(const std::string& dir, uint64_t jobs) {
  reporter_config cfg;
  cfg.log_dir = dir;
  cfg.command = "bbcluster test";
  cfg.p = 1.0;
  cfg.expected_jobs = jobs;
  return cfg;
}

} // namespace

TEST_CASE("the reporter journals results as they arrive and totals them on finish", "[actors]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir;
  auto rep = sys.spawn(reporter, config_for(dir.path, 2));

  eval_result ok;
  ok.job_id = 1;
  ok.attempt = 1;
  ok.op_name = "aten.relu.default";
  correctness_record c;
  c.op_name = ok.op_name;
  c.is_correct = true;
  ok.correctness.push_back(c);
  eval_job job;
  job.job_id = 2;
  job.attempt = 2;
  job.op_name = "aten.add.Tensor";
  job.correctness_inputs = {"((T([2], f32), T([2], f32),), {})"};
  auto crashed = failed_result(job, outcome::crashed, "runner killed by signal 9 (SIGKILL)");

  caf::scoped_actor self{sys};
  self->send(rep, atom::result_v, ok);
  sched.run();
  // Journaled before the sweep ends.
  auto journal = test::read_file(dir / "results.jsonl");
  CHECK(std::count(journal.begin(), journal.end(), '\n') == 1);
  self->send(rep, atom::result_v, crashed);
  self->send(rep, atom::finish_v);
  sched.run();
  bool got = false;
  self->receive(
    [&](sweep_report& r) {
      got = true;
      CHECK(r.jobs == 2);
      CHECK(r.failed_jobs == 1);
      CHECK(r.log_dir == dir.path);
      CHECK(r.scores_text.find("correctness score (mean pass rate over all operators): 0.50")
            == 0);
    },
    caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(got);
  journal = test::read_file(dir / "results.jsonl");
  CHECK(std::count(journal.begin(), journal.end(), '\n') == 2);
  CHECK(journal.find("\"outcome\":\"crashed\"") != std::string::npos);
  caf::anon_send_exit(rep, caf::exit_reason::user_shutdown);
  sched.run();
  for (auto name : {"OVERALL_SUMMARY.md", "full_results.json", "operator_summary.csv", "failed_tests.json"})
    CHECK(std::filesystem::exists(dir / name));
}

TEST_CASE("the reports grow as operators finish, and a stop writes them marked partial",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir;
  auto board = std::make_shared<progress_board>(
    std::map<std::string, uint64_t>{{"aten.relu.default", 1}, {"aten.add.Tensor", 1}, {"aten.mm.default", 1}});
  auto rcfg = config_for(dir.path, 3);
  rcfg.board = board;
  auto rep = sys.spawn(reporter, rcfg);
  sched.run();
  // A page from the start, before any operator finished.
  auto html = test::read_file(dir / "report.html");
  CHECK_THAT(html, Catch::Contains("Running: 0 of 3 operators"));

  eval_result ok;
  ok.job_id = 1;
  ok.attempt = 1;
  ok.op_name = "aten.relu.default";
  correctness_record c;
  c.is_correct = true;
  ok.correctness.push_back(c);
  caf::scoped_actor self{sys};
  self->send(rep, atom::result_v, ok);
  sched.run();
  CHECK(board->snapshot().ops_done == 1);
  html = test::read_file(dir / "report.html");
  CHECK_THAT(html, Catch::Contains("Running: 1 of 3 operators"));
  CHECK_THAT(html, Catch::Contains("<td>relu.default</td>"));
  CHECK_THAT(test::read_file(dir / "operator_summary.csv"), Catch::Contains("\nrelu.default,"));
  CHECK_THAT(test::read_file(dir / "OVERALL_SUMMARY.md"), Catch::Contains("## Running"));
  auto record = nlohmann::json::parse(test::read_file(dir / "operators/relu.default.json"));
  CHECK(record["op_name"] == "relu.default");
  CHECK(record["outcome"] == "ok");
  // full_results.json is written at the end only; no temporary is left behind.
  CHECK_FALSE(std::filesystem::exists(dir / "full_results.json"));
  CHECK_FALSE(std::filesystem::exists(dir / "report.html.tmp"));

  self->send(rep, atom::stop_v);
  sched.run();
  bool got = false;
  self->receive(
    [&](sweep_report& r) {
      got = true;
      CHECK(r.partial);
      CHECK(r.jobs == 1);
    },
    caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(got);
  auto md = test::read_file(dir / "OVERALL_SUMMARY.md");
  CHECK_THAT(md, Catch::Contains("## Partial"));
  CHECK_THAT(md, Catch::Contains("1 of 3 operators are in"));
  CHECK_THAT(md, Catch::Contains("--resume " + dir.path));
  html = test::read_file(dir / "report.html");
  CHECK_THAT(html, Catch::Contains("Partial: the sweep was stopped with 1 of 3 operators"));
  CHECK_THAT(html, !Catch::Contains("location.reload()"));
  CHECK(nlohmann::json::parse(test::read_file(dir / "full_results.json")).size() == 1);
  caf::anon_send_exit(rep, caf::exit_reason::user_shutdown);
  sched.run();
}

namespace {

// A correct result of operator `i` (aten.op<i>.default) on two inputs.
eval_result numbered_result(size_t i) {
  eval_result r;
  r.job_id = i + 1;
  r.attempt = 1;
  r.op_name = "aten.op" + std::to_string(i) + ".default";
  for (auto args : {"((T([64], f32),), {})", "((T([64, 64], f32),), {})"}) {
    correctness_record c;
    c.op_name = r.op_name;
    c.args = args;
    c.is_correct = true;
    r.correctness.push_back(c);
    performance_record p;
    p.op_name = r.op_name;
    p.args = args;
    p.successfully_ran = true;
    p.speedup = 1.5;
    p.benchmark_time_ms = 0.2;
    p.reference_time_ms = 0.3;
    r.performance.push_back(p);
  }
  return r;
}

size_t lines_of(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

} // namespace

TEST_CASE("many results in a short time: few rewrites of the growing reports, every operator "
          "in the final ones", "[actors]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir;
  const size_t n = 100;
  auto rcfg = config_for(dir.path, n);
  rcfg.reports_interval_s = 0.25;
  auto rep = sys.spawn(reporter, rcfg);
  sched.run();
  caf::scoped_actor self{sys};
  // A result every 10 ms of the test clock: one second in all, four intervals.
  for (size_t i = 0; i < n; ++i) {
    self->send(rep, atom::result_v, numbered_result(i));
    sched.run();
    // The journal and the operator's record as each result arrives.
    CHECK(lines_of(test::read_file(dir / "results.jsonl")) == i + 1);
    CHECK(std::filesystem::exists(dir / ("operators/op" + std::to_string(i) + ".default.json")));
    auto shown = lines_of(test::read_file(dir / "operator_summary.csv")) - 1;
    if (i == 0)
      // The first is shown at once.
      CHECK(shown == 1);
    else if (i == n - 1)
      // The last waits for its interval's end.
      CHECK(shown < n);
    sched.advance_time(std::chrono::milliseconds(10));
    sched.run();
  }
  sched.advance_time(std::chrono::milliseconds(250));
  sched.run();
  CHECK(lines_of(test::read_file(dir / "operator_summary.csv")) == n + 1);
  CHECK_THAT(test::read_file(dir / "OVERALL_SUMMARY.md"), Catch::Contains("## Running"));
  self->send(rep, atom::finish_v);
  sched.run();
  bool got = false;
  self->receive([&](sweep_report& r) { got = r.jobs == n; }, caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(got);
  auto load = nlohmann::json::parse(test::read_file(dir / "profile.json"))["reporter"];
  CHECK(load["results"] == n);
  CHECK(load["rewrites"].get<size_t>() >= 3);
  CHECK(load["rewrites"].get<size_t>() <= 6);
  CHECK(load["cpu_seconds"].get<double>() > 0.0);
  CHECK(lines_of(test::read_file(dir / "operator_summary.csv")) == n + 1);
  auto html = test::read_file(dir / "report.html");
  for (size_t i = 0; i < n; ++i)
    CHECK_THAT(html, Catch::Contains("<td>op" + std::to_string(i) + ".default</td>"));
  CHECK_THAT(test::read_file(dir / "OVERALL_SUMMARY.md"), !Catch::Contains("## Running"));
  caf::anon_send_exit(rep, caf::exit_reason::user_shutdown);
  sched.run();
}

TEST_CASE("a result held back by the interval is shown when it ends, with no result after it",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir;
  auto rcfg = config_for(dir.path, 3);
  rcfg.reports_interval_s = 2.0;
  auto rep = sys.spawn(reporter, rcfg);
  sched.run();
  caf::scoped_actor self{sys};
  self->send(rep, atom::result_v, numbered_result(0));
  sched.run();
  CHECK_THAT(test::read_file(dir / "report.html"), Catch::Contains("Running: 1 of 3 operators"));
  CHECK_FALSE(sched.has_pending_timeout());
  self->send(rep, atom::result_v, numbered_result(1));
  sched.run();
  // Journaled and recorded now; in the growing reports once the interval is over.
  CHECK(lines_of(test::read_file(dir / "results.jsonl")) == 2);
  CHECK(std::filesystem::exists(dir / "operators/op1.default.json"));
  CHECK_THAT(test::read_file(dir / "operator_summary.csv"), !Catch::Contains("\nop1.default,"));
  CHECK(sched.has_pending_timeout());
  CHECK(sched.advance_time(std::chrono::milliseconds(1900)) == 0);
  sched.run();
  CHECK_THAT(test::read_file(dir / "report.html"), Catch::Contains("Running: 1 of 3 operators"));
  CHECK(sched.advance_time(std::chrono::milliseconds(100)) == 1);
  sched.run();
  CHECK_THAT(test::read_file(dir / "operator_summary.csv"), Catch::Contains("\nop1.default,"));
  CHECK_THAT(test::read_file(dir / "report.html"), Catch::Contains("Running: 2 of 3 operators"));
  CHECK_THAT(test::read_file(dir / "OVERALL_SUMMARY.md"), Catch::Contains("2 of 3 operators are in"));
  // Nothing pending: no tick armed.
  CHECK_FALSE(sched.has_pending_timeout());
  caf::anon_send_exit(rep, caf::exit_reason::user_shutdown);
  sched.run();
}

TEST_CASE("detached, as bbcluster spawns it, the reporter paces its rewrites in real time and "
          "counts its own CPU", "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  const size_t n = 2000;
  auto rcfg = config_for(dir.path, n);
  rcfg.reports_interval_s = 0.1;
  auto rep = sys.spawn<caf::detached>(reporter, rcfg);
  caf::scoped_actor self{sys};
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i)
    self->send(rep, atom::result_v, numbered_result(i));
  bool got = false;
  self->request(rep, std::chrono::seconds(120), atom::finish_v)
    .receive([&](sweep_report& r) { got = r.jobs == n; }, [](caf::error&) {});
  REQUIRE(got);
  auto wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto load = nlohmann::json::parse(test::read_file(dir / "profile.json"))["reporter"];
  INFO("wall " << wall << " s, profile " << load.dump());
  CHECK(load["results"] == n);
  // At most one rewrite an interval (and the one at once), far fewer than results.
  CHECK(load["rewrites"].get<size_t>() >= 1);
  CHECK(load["rewrites"].get<double>() <= wall / 0.1 + 1);
  CHECK(load["rewrites"].get<size_t>() < n / 10);
  CHECK(load["cpu_seconds"].get<double>() > 0.0);
  CHECK(load["cpu_seconds"].get<double>() <= wall + 0.05);
  CHECK(lines_of(test::read_file(dir / "operator_summary.csv")) == n + 1);
  CHECK(lines_of(test::read_file(dir / "results.jsonl")) == n);
  self->send_exit(rep, caf::exit_reason::user_shutdown);
}
