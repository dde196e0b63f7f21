#include <catch2/catch.hpp>

#include <cstdlib>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/evaluator.hpp"
#include "messages/errors.hpp"
#include "suite/suite.hpp"
#include "support.hpp"

using namespace bb;

namespace {

eval_job smoke_job(uint64_t id) {
  auto op = smoke_suite().ops.front();
  eval_job job;
  job.job_id = id;
  job.attempt = 1;
  job.op_name = op.op_name;
  job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
  job.correctness_inputs = op.correctness;
  job.performance_inputs = {"((T([16], f32),), {})"};
  return job;
}

eval_result evaluate(caf::scoped_actor& self, const evaluator_actor& e, const eval_job& job) {
  eval_result out;
  self->request(e, std::chrono::seconds(60), atom::evaluate_v, job)
    .receive([&](eval_result& r) { out = std::move(r); },
             [&](caf::error& err) { FAIL("evaluator failed: " << caf::to_string(err)); });
  return out;
}

} // namespace

TEST_CASE("the evaluator runs jobs in its runner and survives the runner's death", "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.log_dir = dir.path;
  ecfg.options.cpu_warmup = 1;
  ecfg.options.cpu_runs = 2;
  // The runner inherits this and kills itself on jobs for this operator.
  ::setenv("BBCLUSTER_TEST_KILL_RUNNER_ON", "aten.crash_me.default", 1);
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};

  auto ok = evaluate(self, e, smoke_job(1));
  CHECK(ok.outcome == bb::outcome::ok);
  REQUIRE(ok.correctness.size() == 1);
  CHECK(ok.correctness[0].is_correct);
  CHECK(ok.where.device == "cpu");

  auto crash_job = smoke_job(2);
  crash_job.op_name = "aten.crash_me.default";
  auto crashed = evaluate(self, e, crash_job);
  CHECK(crashed.outcome == bb::outcome::crashed);
  CHECK(crashed.detail.rfind("runner killed by signal 9 (SIGKILL) during ", 0) == 0);
  REQUIRE(crashed.correctness.size() == 1);
  CHECK(crashed.correctness[0].error_type == "crashed");

  // A fresh runner takes the next job.
  auto after = evaluate(self, e, smoke_job(3));
  CHECK(after.outcome == bb::outcome::ok);
  self->send_exit(e, caf::exit_reason::user_shutdown);
  ::unsetenv("BBCLUSTER_TEST_KILL_RUNNER_ON");
}

TEST_CASE("a slot whose runner cannot start is taken out of service with the reason",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  auto fake = dir / "fake_runner.sh";
  test::write_file(fake, "#!/bin/sh\necho 'no torch here' >&2\nexit 7\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  evaluator_config ecfg;
  ecfg.runner = fake;
  ecfg.log_dir = dir / "logs";
  ecfg.check_attempts = 2;
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};
  self->monitor(e);
  std::string why;
  self->request(e, std::chrono::seconds(60), atom::evaluate_v, smoke_job(1))
    .receive([&](eval_result&) { FAIL("a slot without a runner answered with a result"); },
             [&](caf::error& err) { why = describe(err); });
  CHECK(why.find("out of service") != std::string::npos);
  CHECK(why.find("exited with status 7") != std::string::npos);
  // The evaluator is gone, so its coordinator gives its jobs to other slots.
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; });
  CHECK(down);
  // It tried check_attempts fresh runners.
  auto log = test::read_file(dir / "logs/runner_local_slot0.log");
  CHECK(log.find("no torch here") != log.rfind("no torch here"));
}

TEST_CASE("a job that outlives its timeout is timed_out and the runner group is killed",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.log_dir = dir.path;
  ecfg.job_timeout_s = 0.5;
  // Enough timed calls on a large tensor to run for many seconds.
  ecfg.options.cpu_warmup = 0;
  ecfg.options.cpu_runs = 1000000;
  ecfg.options.cpu_max_seconds = 0.0;
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};
  auto job = smoke_job(1);
  job.performance_inputs = {"((T([1024, 1024], f32),), {})"};
  auto r = evaluate(self, e, job);
  CHECK(r.outcome == bb::outcome::timed_out);
  CHECK(r.detail.find("killed by signal 15 (SIGTERM)") != std::string::npos);
  self->send_exit(e, caf::exit_reason::user_shutdown);
}
