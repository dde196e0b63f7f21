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

TEST_CASE("the reporter journals results as they arrive and totals them on finish", "[actors]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir;
  auto rep = sys.spawn(reporter, reporter_config{dir.path, "bbcluster test", 1.0, 2});

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
  reporter_config rcfg{dir.path, "bbcluster test", 1.0, 3};
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
