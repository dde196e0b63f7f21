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
