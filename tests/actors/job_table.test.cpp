#include <catch2/catch.hpp>

#include "actors/job_table.hpp"

using namespace bb;

namespace {

eval_result ended(const eval_job& job, const std::string& outcome) {
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  r.outcome = outcome;
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
  CHECK(t.finish(ended(*first, "ok")) == job_table::verdict::terminal);
  CHECK(t.finish(ended(*second, "ok")) == job_table::verdict::terminal);
  CHECK(t.all_done());
}

TEST_CASE("a runner fault is retried until the attempt bound, keeping the count", "[core]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {"aten", "", "", "aten", "", ""});
  auto j1 = *t.next();
  CHECK(t.finish(ended(j1, "crashed")) == job_table::verdict::retry);
  CHECK(t.state_of(id) == job_table::state::queued);
  auto j2 = *t.next();
  CHECK(j2.attempt == 2);
  CHECK(t.finish(ended(j2, "timed_out")) == job_table::verdict::terminal);
  CHECK(t.done() == 1);
}

TEST_CASE("kernel verdicts are terminal at once and stale results change nothing", "[core]") {
  job_table t(3);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {"aten", "", "", "aten", "", ""});
  auto j = *t.next();
  auto late = ended(j, "crashed");
  CHECK(t.finish(ended(j, "ok")) == job_table::verdict::terminal);
  CHECK(t.finish(late) == job_table::verdict::stale);
  auto other = late;
  other.job_id = 99;
  CHECK(t.finish(other) == job_table::verdict::stale);
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
