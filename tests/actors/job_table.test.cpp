#include <catch2/catch.hpp>

#include "actors/job_table.hpp"

using namespace bb;

namespace {

eval_result ended(const eval_job& job, outcome why) {
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  r.outcome = why;
  return r;
}

} // namespace

TEST_CASE("jobs wait for their artefact, then run in order", "[core]") {
  job_table t(2);
  auto a = t.add({"aten.a.default", {"x"}, {"y"}});
  auto b = t.add({"aten.b.default", {}, {}});
  CHECK_FALSE(t.next());
  t.set_artefact(b, {"aten", "", "", "aten", "", ""});
  t.set_artefact(a, {"aten", "", "", "aten", "", ""});
  auto first = t.next();
  REQUIRE(first);
  CHECK(first->job_id == b);
  CHECK(first->attempt == 1);
  auto second = t.next();
  REQUIRE(second);
  CHECK(second->correctness_inputs == std::vector<std::string>{"x"});
  CHECK(t.finish(ended(*first, outcome::ok)) == job_table::verdict::terminal);
  CHECK(t.finish(ended(*second, outcome::ok)) == job_table::verdict::terminal);
  // Terminal verdicts wait for the generator's word.
  CHECK_FALSE(t.all_done());
  CHECK(t.state_of(a) == job_table::state::reviewing);
  t.close(a);
  t.close(b);
  t.close(b);
  CHECK(t.all_done());
}

TEST_CASE("a runner fault is retried until the attempt bound, keeping the count", "[core]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {"aten", "", "", "aten", "", ""});
  auto j1 = *t.next();
  CHECK(t.finish(ended(j1, outcome::crashed)) == job_table::verdict::retry);
  CHECK(t.state_of(id) == job_table::state::queued);
  auto j2 = *t.next();
  CHECK(j2.attempt == 2);
  CHECK(t.finish(ended(j2, outcome::timed_out)) == job_table::verdict::terminal);
  t.close(id);
  CHECK(t.done() == 1);
}

TEST_CASE("kernel verdicts are terminal at once and stale results change nothing", "[core]") {
  job_table t(3);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {"aten", "", "", "aten", "", ""});
  auto j = *t.next();
  auto late = ended(j, outcome::crashed);
  CHECK(t.finish(ended(j, outcome::ok)) == job_table::verdict::terminal);
  CHECK(t.finish(late) == job_table::verdict::stale);
  auto other = late;
  other.job_id = 99;
  CHECK(t.finish(other) == job_table::verdict::stale);
  t.close(id);
  CHECK(t.done() == 1);
}

TEST_CASE("abandon ends queued and waiting jobs exactly once", "[core]") {
  job_table t(2);
  auto a = t.add({"aten.a.default", {}, {}});
  auto b = t.add({"aten.b.default", {}, {}});
  t.set_artefact(a, {"aten", "", "", "aten", "", ""});
  CHECK(t.unfinished() == std::vector<uint64_t>{a, b});
  t.abandon(a);
  t.abandon(b);
  t.abandon(b);
  CHECK(t.all_done());
  CHECK(t.queued() == 0);
  CHECK_FALSE(t.next());
}

TEST_CASE("a revised job evaluates its next version with fresh fault bounds", "[core]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", {"x"}, {}});
  t.set_artefact(id, {"py", "v1.py", "", "h1", "", ""});
  auto v1 = *t.next();
  CHECK(t.finish(ended(v1, outcome::crashed)) == job_table::verdict::retry);
  auto v1b = *t.next();
  CHECK(t.finish(ended(v1b, outcome::incorrect)) == job_table::verdict::terminal);
  CHECK(t.version(id) == 1);
  CHECK(t.revise(id) == 2);
  CHECK(t.state_of(id) == job_table::state::generating);
  CHECK_FALSE(t.next());
  t.set_artefact(id, {"py", "v2.py", "", "h2", "", ""});
  auto v2 = *t.next();
  CHECK(v2.kernel.path == "v2.py");
  CHECK(v2.attempt == 3); // attempts name dispatches; a late v1 result is stale
  CHECK(t.finish(ended(v1b, outcome::ok)) == job_table::verdict::stale);
  // One crash of v2 is retried: the bound counts this version's faults only.
  CHECK(t.finish(ended(v2, outcome::crashed)) == job_table::verdict::retry);
  auto v2b = *t.next();
  CHECK(t.finish(ended(v2b, outcome::ok)) == job_table::verdict::terminal);
  CHECK_FALSE(t.all_done());
  t.close(id);
  CHECK(t.all_done());
}
