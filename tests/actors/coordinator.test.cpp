#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/aten_generator.hpp"
#include "actors/coordinator.hpp"
#include "deterministic.hpp"

using namespace bb;

namespace {

// What the mocks saw, owned by the test.
struct trace {
  std::map<std::string, int> evaluated;
  std::vector<eval_result> reported;
  std::vector<eval_result> requeued;
  std::vector<eval_result> revised;
  /// Artefact paths the evaluators saw.
  std::vector<std::string> kernels;
  /// Operators in the order the evaluators saw them.
  std::vector<std::string> order;
  bool finished = false;
  bool stopped = false;
};

reporter_actor::behavior_type mock_reporter(reporter_actor::pointer, std::shared_ptr<trace> t) {
  return {
    [t](atom::result, eval_result& r) { t->reported.push_back(std::move(r)); },
    [t](atom::requeue, eval_result& r) { t->requeued.push_back(std::move(r)); },
    [t](atom::revise, eval_result& r) { t->revised.push_back(std::move(r)); },
    [t](atom::finish) {
      t->finished = true;
      sweep_report rep;
      rep.jobs = t->reported.size();
      return rep;
    },
    [t](atom::stop) {
      t->stopped = true;
      sweep_report rep;
      rep.jobs = t->reported.size();
      rep.partial = true;
      return rep;
    },
  };
}

evaluator_actor::behavior_type good_evaluator(evaluator_actor::pointer, std::shared_ptr<trace> t) {
  return {
    [t](atom::evaluate, const eval_job& job) {
      ++t->evaluated[job.op_name];
      t->kernels.push_back(job.kernel.path);
      t->order.push_back(job.op_name);
      eval_result r;
      r.job_id = job.job_id;
      r.attempt = job.attempt;
      r.op_name = job.op_name;
      correctness_record c;
      c.op_name = job.op_name;
      c.is_correct = true;
      r.correctness.push_back(c);
      return r;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

// A generator that has no kernel for v1, writes v2 after v1's evaluation, and makes v2 final.
generator_actor::behavior_type revising_generator(generator_actor::pointer) {
  return {
    [](atom::generate, const std::string&) {
      artefact a;
      a.kind = "none";
      a.source = "v1: the reply has no fenced code block";
      return a;
    },
    [](atom::revise, eval_result& r) {
      generation_step step;
      if (r.version < 2) {
        step.final = false;
        step.next.kind = "aten";
        step.next.path = "v" + std::to_string(r.version + 1);
        return step;
      }
      step.result = std::move(r);
      return step;
    },
  };
}

// Answers at once for every operator but op0, whose kernel comes only after the evaluations
// of all the others came back: an author that thinks longer than three evaluations take.
struct held_kernel {
  caf::typed_response_promise<artefact> promise;
  size_t revisions = 0;
};

generator_actor::behavior_type slow_generator(generator_actor::pointer self,
                                              std::shared_ptr<held_kernel> held) {
  return {
    [self, held](atom::generate, const std::string& op) -> caf::typed_response_promise<artefact> {
      auto rp = self->make_response_promise<artefact>();
      artefact a;
      a.kind = "aten";
      if (op == "aten.op0.default")
        held->promise = rp;
      else
        rp.deliver(a);
      return rp;
    },
    [held](atom::revise, eval_result& r) {
      if (++held->revisions == 3) {
        artefact a;
        a.kind = "aten";
        held->promise.deliver(a);
      }
      generation_step step;
      step.result = std::move(r);
      return step;
    },
  };
}

// Dies on its first job, as an evaluator whose thread or node goes away.
evaluator_actor::behavior_type dying_evaluator(evaluator_actor::pointer self) {
  return {
    [self](atom::evaluate, const eval_job&) {
      // Quits without answering: the request fails with a broken promise.
      auto rp = self->make_response_promise<eval_result>();
      self->quit(caf::exit_reason::user_shutdown);
      return rp;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

struct fixture : bb::test::deterministic_system {
  std::shared_ptr<trace> t = std::make_shared<trace>();

  coordinator_config config(size_t ops) {
    coordinator_config c;
    for (size_t i = 0; i < ops; ++i)
      c.work.ops.push_back({"aten.op" + std::to_string(i) + ".default", {"((T([2], f32),), {})"}, {}});
    return c;
  }

  // Runs the sweep to completion and returns the report (or fails the test).
  sweep_report run(const coordinator_config& c, std::vector<evaluator_actor> evaluators,
                   generator_actor generator = {}) {
    auto reporter = keep(sys->spawn(mock_reporter, t));
    if (!generator)
      generator = keep(sys->spawn(aten_generator));
    auto coord = keep(sys->spawn(coordinator, c, generator, evaluators, reporter, compile_pool_actor{}));
    caf::scoped_actor self{*sys};
    self->send(coord, atom::run_v);
    sched->run();
    sweep_report out;
    bool got = false;
    self->receive([&](sweep_report& r) { out = r, got = true; },
                  [&](caf::error& err) { FAIL("coordinator failed: " << caf::to_string(err)); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    REQUIRE(got);
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "the coordinator sends every job and reports each once", "[actors]") {
  auto e1 = keep(sys->spawn(good_evaluator, t));
  auto e2 = keep(sys->spawn(good_evaluator, t));
  auto report = run(config(5), {e1, e2});
  CHECK(report.jobs == 5);
  CHECK(t->finished);
  REQUIRE(t->evaluated.size() == 5);
  for (auto& [op, n] : t->evaluated)
    CHECK(n == 1);
  REQUIRE(t->reported.size() == 5);
  for (auto& r : t->reported)
    CHECK(r.outcome == bb::outcome::ok);
}

TEST_CASE_METHOD(fixture, "a job whose evaluator dies is retried elsewhere", "[actors]") {
  auto dying = keep(sys->spawn(dying_evaluator));
  auto good = keep(sys->spawn(good_evaluator, t));
  auto report = run(config(3), {good, dying});
  CHECK(report.jobs == 3);
  REQUIRE(t->reported.size() == 3);
  int retried = 0;
  for (auto& r : t->reported) {
    CHECK(r.outcome == bb::outcome::ok);
    retried += r.attempt == 2;
  }
  CHECK(retried == 1);
}

TEST_CASE_METHOD(fixture, "with every evaluator gone, every job still reaches the reporter",
                 "[actors]") {
  auto dying = keep(sys->spawn(dying_evaluator));
  auto c = config(4);
  c.max_attempts = 1;
  auto report = run(c, {dying});
  CHECK(report.jobs == 4);
  REQUIRE(t->reported.size() == 4);
  for (auto& r : t->reported) {
    CHECK(r.outcome == bb::outcome::infra_error);
    REQUIRE(r.correctness.size() == 1);
    CHECK_FALSE(r.correctness[0].is_correct);
  }
}

TEST_CASE_METHOD(fixture, "an empty suite finishes at once", "[actors]") {
  auto e = keep(sys->spawn(good_evaluator, t));
  auto report = run(config(0), {e});
  CHECK(report.jobs == 0);
  CHECK(t->finished);
}

TEST_CASE_METHOD(fixture, "evaluated versions go back to the generator until it makes one final",
                 "[actors]") {
  auto e = keep(sys->spawn(good_evaluator, t));
  auto c = config(2);
  c.numbered_versions = true;
  auto report = run(c, {e}, keep(sys->spawn(revising_generator)));
  CHECK(report.jobs == 2);
  // v1 had no kernel: nothing to evaluate; v2 was evaluated once per operator.
  CHECK(t->kernels == std::vector<std::string>{"v2", "v2"});
  // Every evaluated version is journaled: v1 (no kernel) and v2 of each operator.
  REQUIRE(t->revised.size() == 4);
  size_t v1 = 0;
  for (auto& r : t->revised)
    if (r.version == 1) {
      ++v1;
      CHECK(r.outcome == bb::outcome::no_kernel);
      CHECK_THAT(r.detail, Catch::Contains("no fenced code block"));
    }
  CHECK(v1 == 2);
  REQUIRE(t->reported.size() == 2);
  for (auto& r : t->reported) {
    CHECK(r.outcome == bb::outcome::ok);
    CHECK(r.version == 2);
  }
}

TEST_CASE_METHOD(fixture, "a slow generation does not hold back the evaluation of other operators",
                 "[actors]") {
  auto e = keep(sys->spawn(good_evaluator, t));
  auto held = std::make_shared<held_kernel>();
  auto report = run(config(4), {e}, keep(sys->spawn(slow_generator, held)));
  CHECK(report.jobs == 4);
  // op0's kernel came after the three others were evaluated, and was evaluated last.
  REQUIRE(t->order.size() == 4);
  CHECK(t->order.back() == "aten.op0.default");
  CHECK(t->reported.size() == 4);
}

namespace {

// An evaluator that keeps its job until the test lets it answer.
struct held_job {
  caf::typed_response_promise<eval_result> promise;
  eval_job job;
  int taken = 0;
};

evaluator_actor::behavior_type holding_evaluator(evaluator_actor::pointer self, std::shared_ptr<held_job> held) {
  return {
    [self, held](atom::evaluate, const eval_job& job) {
      ++held->taken;
      held->job = job;
      held->promise = self->make_response_promise<eval_result>();
      return held->promise;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

eval_result passing(const eval_job& job) {
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  correctness_record c;
  c.is_correct = true;
  r.correctness.push_back(c);
  return r;
}

} // namespace

TEST_CASE_METHOD(fixture, "told to stop, the coordinator lets the running job finish, dispatches "
                          "nothing more and answers with partial reports", "[actors]") {
  auto held = std::make_shared<held_job>();
  auto e = keep(sys->spawn(holding_evaluator, held));
  auto reporter = keep(sys->spawn(mock_reporter, t));
  auto coord = keep(sys->spawn(coordinator, config(3), keep(sys->spawn(aten_generator)),
                               std::vector<evaluator_actor>{e}, reporter, compile_pool_actor{}));
  caf::scoped_actor self{*sys};
  self->send(coord, atom::run_v);
  sched->run();
  REQUIRE(held->taken == 1);
  caf::anon_send(coord, atom::stop_v);
  sched->run();
  // The running job is not cut short: no answer yet.
  bool answered = false;
  self->receive([&](sweep_report&) { answered = true; }, caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK_FALSE(answered);
  CHECK_FALSE(t->stopped);
  held->promise.deliver(passing(held->job));
  sched->run();
  sweep_report out;
  self->receive([&](sweep_report& r) { out = r, answered = true; },
                caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(answered);
  CHECK(out.partial);
  CHECK(t->stopped);
  CHECK_FALSE(t->finished);
  CHECK(held->taken == 1); // the two queued jobs were never dispatched
  REQUIRE(t->reported.size() == 1);
  CHECK(t->reported[0].op_name == held->job.op_name);
}

TEST_CASE_METHOD(fixture, "told to halt, the coordinator answers at once and ignores the result "
                          "that comes after", "[actors]") {
  auto held = std::make_shared<held_job>();
  auto e = keep(sys->spawn(holding_evaluator, held));
  auto reporter = keep(sys->spawn(mock_reporter, t));
  auto coord = keep(sys->spawn(coordinator, config(2), keep(sys->spawn(aten_generator)),
                               std::vector<evaluator_actor>{e}, reporter, compile_pool_actor{}));
  caf::scoped_actor self{*sys};
  self->send(coord, atom::run_v);
  sched->run();
  REQUIRE(held->taken == 1);
  caf::anon_send(coord, atom::halt_v);
  sched->run();
  sweep_report out;
  bool answered = false;
  self->receive([&](sweep_report& r) { out = r, answered = true; },
                caf::after(std::chrono::seconds(0)) >> [] {});
  REQUIRE(answered);
  CHECK(out.partial);
  CHECK(t->reported.empty());
  // The abandoned job's late result changes nothing: --resume runs it again.
  held->promise.deliver(passing(held->job));
  sched->run();
  CHECK(t->reported.empty());
  CHECK(held->taken == 1);
}
