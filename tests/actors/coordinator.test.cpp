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
  /// Shards' terminal results, as the reporter journals them.
  std::vector<eval_result> shards;
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
    [t](atom::shard, eval_result& r) { t->shards.push_back(std::move(r)); },
    [t](atom::requeue, eval_result& r) { t->requeued.push_back(std::move(r)); },
    [t](atom::revise, eval_result& r) { t->revised.push_back(std::move(r)); },
    [](atom::tick) { FAIL_CHECK("only the reporter sends itself a tick"); },
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
      a.kind = kernel_kind::none;
      a.why_none = "v1: the reply has no fenced code block";
      return a;
    },
    [](atom::revise, eval_result& r) {
      generation_step step;
      if (r.version < 2) {
        step.final = false;
        step.next.kind = kernel_kind::aten;
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
      a.kind = kernel_kind::aten;
      if (op == "aten.op0.default")
        held->promise = rp;
      else
        rp.deliver(a);
      return rp;
    },
    [held](atom::revise, eval_result& r) {
      if (++held->revisions == 3) {
        artefact a;
        a.kind = kernel_kind::aten;
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
  bool release = false;
  eval_result answer;
};

evaluator_actor::behavior_type holding_evaluator(evaluator_actor::pointer self, std::shared_ptr<held_job> held) {
  return {
    [self, held](atom::evaluate, const eval_job& job) {
      ++held->taken;
      held->job = job;
      held->promise = self->make_response_promise<eval_result>();
      return held->promise;
    },
    // The test answers the held job through a ping, so that the promise is delivered in the
    // actor's own context.
    [held](atom::ping) {
      if (held->release) {
        held->release = false;
        held->promise.deliver(held->answer);
      }
      return atom::pong_v;
    },
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
  held->answer = passing(held->job);
  held->release = true;
  caf::anon_send(e, atom::ping_v);
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
  held->answer = passing(held->job);
  held->release = true;
  caf::anon_send(e, atom::ping_v);
  sched->run();
  CHECK(t->reported.empty());
  CHECK(held->taken == 1);
}

namespace {

// An evaluator that answers each input with its own records (args: the input text) and notes
// every job it saw; with `crash_on` set, a job holding that input crashes once.
struct echo_log {
  std::vector<eval_job> jobs;
  std::string crash_on;
  bool crashed = false;
};

evaluator_actor::behavior_type echo_evaluator(evaluator_actor::pointer, std::shared_ptr<echo_log> log) {
  return {
    [log](atom::evaluate, const eval_job& job) {
      log->jobs.push_back(job);
      eval_result r;
      r.job_id = job.job_id;
      r.attempt = job.attempt;
      r.op_name = job.op_name;
      auto& in = job.correctness_inputs;
      if (!log->crashed && std::find(in.begin(), in.end(), log->crash_on) != in.end()) {
        log->crashed = true;
        r.outcome = bb::outcome::crashed;
        r.detail = "runner killed by signal 11 (SIGSEGV)";
        return r;
      }
      for (auto& text : in) {
        correctness_record c;
        c.op_name = job.op_name;
        c.args = text;
        c.is_correct = true;
        r.correctness.push_back(c);
      }
      for (auto& text : job.performance_inputs) {
        performance_record p;
        p.op_name = job.op_name;
        p.args = text;
        p.speedup = 1.5;
        p.successfully_ran = true;
        r.performance.push_back(p);
      }
      return r;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

std::vector<std::string> inputs(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back("x" + std::to_string(i));
  return out;
}

// Twelve inputs of one operator and one of another, over three slots at two shards a slot.
coordinator_config sharded_config() {
  coordinator_config c;
  c.work.ops.push_back({"aten.big.default", inputs(12), inputs(12)});
  c.work.ops.push_back({"aten.small.default", {"y"}, {"y"}});
  c.shards_per_slot = 2;
  return c;
}

// Three slots that answer every input as correct, logging the jobs they get.
std::vector<evaluator_actor> echo_slots(fixture& f, const std::shared_ptr<echo_log>& log) {
  std::vector<evaluator_actor> slots;
  for (int i = 0; i < 3; ++i)
    slots.push_back(f.keep(f.sys->spawn(echo_evaluator, log)));
  return slots;
}

std::vector<std::string> args_of(const std::vector<correctness_record>& rs) {
  std::vector<std::string> out;
  for (auto& r : rs)
    out.push_back(r.args);
  return out;
}

} // namespace

TEST_CASE_METHOD(fixture, "an operator is split into shards over the slots, longest first, and "
                          "reported once with its records in input order", "[actors]") {
  auto log = std::make_shared<echo_log>();
  auto slots = echo_slots(*this, log);
  auto report = run(sharded_config(), slots);
  CHECK(report.jobs == 2);
  CHECK(report.dispatched == log->jobs.size());
  // 13 expected seconds over 3 slots at 2 shards a slot: shards of about 2 seconds.
  size_t big_jobs = 0;
  for (auto& j : log->jobs)
    if (j.op_name == "aten.big.default") {
      ++big_jobs;
      CHECK(j.shard.is_part());
      CHECK(j.shard.correctness_total == 12);
      CHECK(j.correctness_inputs.size() <= 3);
      CHECK(j.correctness_inputs == j.performance_inputs);
    }
  CHECK(big_jobs >= 4);
  // The shards of the larger operator went out before the one-input operator's job.
  CHECK(log->jobs.front().op_name == "aten.big.default");
  REQUIRE(t->reported.size() == 2);
  for (auto& r : t->reported) {
    if (r.op_name != "aten.big.default") {
      CHECK(r.shards == 0);
      continue;
    }
    CHECK(r.shards == big_jobs);
    CHECK(args_of(r.correctness) == inputs(12));
    REQUIRE(r.performance.size() == 12);
    CHECK(r.performance[11].args == "x11");
    CHECK(r.outcome == bb::outcome::ok);
  }
  // Each shard's terminal result was journaled; the unsharded operator's job was not.
  CHECK(t->shards.size() == big_jobs);
  for (auto& s : t->shards)
    CHECK(s.op_name == "aten.big.default");
}

TEST_CASE_METHOD(fixture, "a crashed shard is retried alone, and the other shards' results stand",
                 "[actors]") {
  auto log = std::make_shared<echo_log>();
  log->crash_on = "x7";
  auto slots = echo_slots(*this, log);
  run(sharded_config(), slots);
  REQUIRE(t->requeued.size() == 1);
  auto& lost = t->requeued.front().shard;
  CHECK(lost.is_part());
  CHECK(lost.correctness_begin <= 7);
  CHECK(lost.correctness_begin + lost.correctness_count > 7);
  // Every input ran once, but those of the crashed shard twice.
  std::map<std::string, int> runs;
  for (auto& j : log->jobs)
    for (auto& x : j.correctness_inputs)
      ++runs[x];
  for (auto& [x, n] : runs) {
    INFO(x);
    bool in_lost = x[0] == 'x' && std::stoul(x.substr(1)) >= lost.correctness_begin
                   && std::stoul(x.substr(1)) < lost.correctness_begin + lost.correctness_count;
    CHECK(n == (in_lost ? 2 : 1));
  }
  REQUIRE(t->reported.size() == 2);
  for (auto& r : t->reported)
    CHECK(r.outcome == bb::outcome::ok);
}

TEST_CASE_METHOD(fixture, "a kernel version is evaluated on every shard before the generator "
                          "decides on it", "[actors]") {
  auto log = std::make_shared<echo_log>();
  auto slots = echo_slots(*this, log);
  auto c = sharded_config();
  c.numbered_versions = true;
  run(c, slots, keep(sys->spawn(revising_generator)));
  // v1 had no kernel; v2 of each operator reached the generator once, merged over its shards.
  size_t v2_big = 0;
  for (auto& r : t->revised)
    if (r.version == 2 && r.op_name == "aten.big.default") {
      ++v2_big;
      CHECK(args_of(r.correctness) == inputs(12));
    }
  CHECK(v2_big == 1);
  for (auto& j : log->jobs)
    CHECK(j.kernel.path == "v2");
  REQUIRE(t->reported.size() == 2);
  for (auto& r : t->reported)
    CHECK(r.version == 2);
}

TEST_CASE_METHOD(fixture, "the shards a resumed sweep finished before are not run again and join "
                          "the operator's records", "[actors]") {
  auto log = std::make_shared<echo_log>();
  auto slots = echo_slots(*this, log);
  auto c = sharded_config();
  eval_result earlier;
  earlier.op_name = "aten.big.default";
  earlier.shard = {0, 5, 12, 0, 5, 12};
  for (size_t i = 0; i < 5; ++i) {
    correctness_record rec;
    rec.args = "x" + std::to_string(i);
    rec.error_msg = "before the resume";
    earlier.correctness.push_back(rec);
    performance_record p;
    p.args = rec.args;
    earlier.performance.push_back(p);
  }
  c.earlier_shards["aten.big.default"] = {earlier};
  run(c, slots);
  for (auto& j : log->jobs)
    for (auto& x : j.correctness_inputs)
      CHECK((x == "y" || std::stoul(x.substr(1)) >= 5));
  REQUIRE(t->reported.size() == 2);
  for (auto& r : t->reported) {
    if (r.op_name != "aten.big.default")
      continue;
    CHECK(args_of(r.correctness) == inputs(12));
    CHECK(r.correctness[4].error_msg == "before the resume");
    CHECK(r.correctness[5].is_correct);
  }
}
