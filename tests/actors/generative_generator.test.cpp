#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/generative_generator.hpp"
#include "deterministic.hpp"
#include "support.hpp"

using namespace bb;
namespace fs = std::filesystem;

namespace {

struct seen {
  std::vector<author_request> requests;
  /// Requests being written at once, at most.
  size_t most_in_flight = 0;
};

// Writes a wrong tanh first, a right one after feedback; relu is right at once; cos never
// has code.
author_actor::behavior_type scripted_author(author_actor::pointer, std::shared_ptr<seen> s) {
  return {
    [s](atom::write, const author_request& req) {
      s->requests.push_back(req);
      author_reply r;
      r.kind = kernel_kind::py;
      r.note = "scripted";
      auto entry = req.op.folder + "_kernel_impl";
      if (req.op.op_name == "aten.cos.default")
        r.why = "the reply has no fenced code block (```)";
      else if (req.op.op_name == "aten.tanh.default" && req.version == 1)
        r.code = "def " + entry + "(x):\n    return x * 0.5\n";
      else
        r.code = "import torch\n\ndef " + entry + "(x):\n    return x\n";
      return r;
    },
  };
}

eval_result evaluation(const eval_job& job, bool correct, double speedup) {
  eval_result r;
  r.job_id = job.job_id;
  r.op_name = job.op_name;
  correctness_record c;
  c.args = "((T([4], f32),), {})";
  c.is_correct = correct;
  c.max_abs_error = correct ? 0.0 : 0.3;
  c.error_type = correct ? "" : "AssertionError";
  r.correctness.push_back(c);
  performance_record p;
  p.args = c.args;
  p.successfully_ran = true;
  p.speedup = speedup;
  r.performance.push_back(p);
  return r;
}

std::string slurp(const fs::path& p) {
  return bb::test::read_file(p.string());
}

struct fixture : bb::test::deterministic_system {
  std::shared_ptr<seen> s = std::make_shared<seen>();
  bb::test::temp_dir tmp;
  fs::path dir = tmp.path;

  generator_actor spawn_generator(uint32_t max_versions, size_t authors) {
    generative_config c;
    c.backend = "llm";
    c.policy.max_versions = max_versions;
    for (auto op : {"aten.relu.default", "aten.tanh.default", "aten.cos.default"})
      c.ops.push_back(make_op_brief(op, "", {"((T([4], f32),), {})"}));
    REQUIRE(c.folder.create(dir.string(), "llm", {{"model", "scripted"}}, "test").empty());
    std::vector<author_actor> pool;
    for (size_t i = 0; i < authors; ++i)
      pool.push_back(keep(sys->spawn(scripted_author, s)));
    return keep(sys->spawn(generative_generator, c, pool));
  }

  fs::path run_path() {
    for (auto& e : fs::directory_iterator(dir))
      return e.path();
    return {};
  }

  template <class T, class... Ts>
  T ask(generator_actor g, Ts&&... xs) {
    caf::scoped_actor self{*sys};
    self->send(g, std::forward<Ts>(xs)...);
    sched->run();
    T out;
    bool got = false;
    self->receive([&](T& x) { out = std::move(x), got = true; },
                  [&](caf::error& err) { FAIL("generator failed: " << caf::to_string(err)); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    REQUIRE(got);
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a wrong version is followed by one written with its feedback",
                 "[actors]") {
  auto g = spawn_generator(3, 2);
  auto v1 = ask<artefact>(g, atom::generate_v, std::string("aten.tanh.default"));
  CHECK(v1.kind == kernel_kind::py);
  CHECK(v1.entry == "tanh__default_kernel_impl");
  CHECK_THAT(v1.path, Catch::EndsWith("tanh__default/tanh__default_implementation_v1.py"));
  eval_job job;
  job.job_id = 7;
  job.op_name = "aten.tanh.default";
  auto r1 = evaluation(job, false, 1.0);
  r1.version = 1;
  auto step = ask<generation_step>(g, atom::revise_v, r1);
  REQUIRE_FALSE(step.final);
  CHECK_THAT(step.next.path, Catch::EndsWith("tanh__default_implementation_v2.py"));
  REQUIRE(s->requests.size() == 2);
  CHECK(s->requests[1].version == 2);
  CHECK_THAT(s->requests[1].feedback, Catch::Contains("Incorrect on input ((T([4], f32),), {})"));
  CHECK_THAT(s->requests[1].feedback, Catch::Contains("return x * 0.5")); // v1's code
  // The evaluation itself goes along, for authors that put it to the model in another form.
  CHECK(s->requests[0].previous.version == 0);
  CHECK(s->requests[1].previous.version == 1);
  REQUIRE(s->requests[1].previous.correctness.size() == 1);
  CHECK(s->requests[1].previous.correctness[0].args == "((T([4], f32),), {})");
  CHECK_FALSE(s->requests[1].previous.correctness[0].is_correct);
  auto r2 = evaluation(job, true, 1.5);
  r2.version = 2;
  auto final_step = ask<generation_step>(g, atom::revise_v, r2);
  REQUIRE(final_step.final);
  CHECK(final_step.result.version == 2);
  auto summary = slurp(run_path() / "tanh__default" / "tanh__default_summary.txt");
  CHECK_THAT(summary, Catch::Contains("Attempts: 2"));
  CHECK_THAT(summary, Catch::Contains("v1: tanh__default_implementation_v1.py: incorrect: 0/1"));
  CHECK_THAT(summary, Catch::Contains("v2: tanh__default_implementation_v2.py: correct, speedup 1.50x"));
  CHECK_THAT(summary, Catch::Contains("Final status: passed (version 2 stands)"));
  auto overall = slurp(run_path() / "OVERALL_SUMMARY.txt");
  CHECK_THAT(overall, Catch::Contains("aten.tanh.default: passed"));
  CHECK_THAT(overall, Catch::Contains("aten.relu.default: in progress"));
}

TEST_CASE_METHOD(fixture, "an operator without code ends after its versions, the last standing",
                 "[actors]") {
  auto g = spawn_generator(2, 1);
  auto v1 = ask<artefact>(g, atom::generate_v, std::string("aten.cos.default"));
  CHECK(v1.kind == kernel_kind::none);
  CHECK_THAT(v1.why_none, Catch::Contains("v1: the reply has no fenced code block"));
  eval_result r1;
  r1.op_name = "aten.cos.default";
  r1.outcome = bb::outcome::no_kernel;
  r1.detail = v1.why_none;
  r1.version = 1;
  auto step = ask<generation_step>(g, atom::revise_v, r1);
  REQUIRE_FALSE(step.final);
  CHECK(step.next.kind == kernel_kind::none);
  CHECK_THAT(s->requests.back().feedback, Catch::Contains("There was no kernel to evaluate"));
  auto r2 = r1;
  r2.version = 2;
  auto last = ask<generation_step>(g, atom::revise_v, r2);
  REQUIRE(last.final);
  CHECK(last.result.version == 2);
  CHECK(last.result.outcome == bb::outcome::no_kernel);
  auto summary = slurp(run_path() / "cos__default" / "cos__default_summary.txt");
  CHECK_THAT(summary, Catch::Contains("Final status: failed"));
  CHECK_THAT(summary, Catch::Contains("no correct version in 2 of 2 attempts"));
  CHECK_FALSE(fs::exists(run_path() / "cos__default" / "cos__default_implementation_v1.py"));
}

TEST_CASE_METHOD(fixture, "requests beyond the authors wait, and every one is answered",
                 "[actors]") {
  auto g = spawn_generator(1, 1);
  caf::scoped_actor self{*sys};
  for (auto op : {"aten.relu.default", "aten.tanh.default", "aten.cos.default"})
    self->send(g, atom::generate_v, std::string(op));
  sched->run();
  size_t answers = 0;
  for (int i = 0; i < 3; ++i)
    self->receive([&](artefact&) { ++answers; },
                  [&](caf::error& err) { FAIL(caf::to_string(err)); },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(answers == 3);
  CHECK(s->requests.size() == 3);
  auto unknown = std::string("aten.nope.default");
  self->send(g, atom::generate_v, unknown);
  sched->run();
  bool refused = false;
  self->receive([&](artefact&) {}, [&](caf::error&) { refused = true; },
                caf::after(std::chrono::seconds(0)) >> [] {});
  CHECK(refused);
}
