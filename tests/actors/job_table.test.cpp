#include <algorithm>
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

TEST_CASE("jobs wait for their artefact, then run longest expected work first", "[actors]") {
  job_table t(2);
  auto a = t.add({"aten.a.default", {"x"}, {"y"}});
  auto b = t.add({"aten.b.default", {}, {}});
  CHECK_FALSE(t.next());
  t.set_artefact(b, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  t.set_artefact(a, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  auto first = t.next();
  REQUIRE(first);
  CHECK(first->job_id == a);
  CHECK(first->attempt == 1);
  CHECK(first->correctness_inputs == std::vector<std::string>{"x"});
  CHECK_FALSE(first->shard.is_part());
  auto second = t.next();
  REQUIRE(second);
  CHECK(second->job_id == b);
  // An operator without inputs still runs once: the runner says whether it exists.
  CHECK(second->correctness_inputs.empty());
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

TEST_CASE("a runner fault is retried until the attempt bound, keeping the count", "[actors]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  auto j1 = *t.next();
  CHECK(t.finish(ended(j1, outcome::crashed)) == job_table::verdict::retry);
  CHECK(t.state_of(id) == job_table::state::queued);
  auto j2 = *t.next();
  CHECK(j2.attempt == 2);
  CHECK(t.finish(ended(j2, outcome::timed_out)) == job_table::verdict::terminal);
  t.close(id);
  CHECK(t.done() == 1);
}

TEST_CASE("kernel verdicts are terminal at once and stale results change nothing", "[actors]") {
  job_table t(3);
  auto id = t.add({"aten.a.default", {}, {}});
  t.set_artefact(id, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
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

TEST_CASE("abandon ends queued and waiting jobs exactly once", "[actors]") {
  job_table t(2);
  auto a = t.add({"aten.a.default", {}, {}});
  auto b = t.add({"aten.b.default", {}, {}});
  t.set_artefact(a, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  CHECK(t.unfinished() == std::vector<uint64_t>{a, b});
  t.abandon(a);
  t.abandon(b);
  t.abandon(b);
  CHECK(t.all_done());
  CHECK(t.queued() == 0);
  CHECK_FALSE(t.next());
}

TEST_CASE("a revised job evaluates its next version with fresh fault bounds", "[actors]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", {"x"}, {}});
  t.set_artefact(id, {bb::kernel_kind::py, "v1.py", "", "h1", "", "", ""});
  auto v1 = *t.next();
  CHECK(t.finish(ended(v1, outcome::crashed)) == job_table::verdict::retry);
  auto v1b = *t.next();
  CHECK(t.finish(ended(v1b, outcome::incorrect)) == job_table::verdict::terminal);
  CHECK(t.version(id) == 1);
  CHECK(t.revise(id) == 2);
  CHECK(t.state_of(id) == job_table::state::generating);
  CHECK_FALSE(t.next());
  t.set_artefact(id, {bb::kernel_kind::py, "v2.py", "", "h2", "", "", ""});
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

namespace {

std::vector<std::string> numbered(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back("i" + std::to_string(i));
  return out;
}

// An operator of `n` paired inputs of one second each, cut into shards of `target` seconds.
op_plan plan_of(size_t n, double target) {
  op_plan p;
  p.work = uniform_work({"aten.a.default", numbered(n), numbered(n)});
  p.target_seconds = target;
  return p;
}

eval_result echoed(const eval_job& job) {
  auto r = ended(job, outcome::ok);
  for (auto& x : job.correctness_inputs) {
    correctness_record c;
    c.args = x;
    c.is_correct = true;
    r.correctness.push_back(c);
  }
  return r;
}

} // namespace

TEST_CASE("a sharded operator: a job per shard, its version terminal once every shard is, "
          "merged in input order", "[actors]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", numbered(10), numbered(10)}, 1, plan_of(10, 4.0));
  t.set_artefact(id, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  CHECK(t.queued() == 3); // 10 s in shards of at most about 4 s
  CHECK(t.sharded(id));
  std::vector<eval_job> jobs;
  while (auto j = t.next(3))
    jobs.push_back(*j);
  REQUIRE(jobs.size() == 3);
  CHECK(t.state_of(id) == job_table::state::running);
  uint32_t covered = 0;
  for (auto& j : jobs) {
    CHECK(j.shard.is_part());
    CHECK(j.shard.correctness_total == 10);
    CHECK(j.correctness_inputs.front() == "i" + std::to_string(j.shard.correctness_begin));
    CHECK(t.operator_of(j.job_id) == id);
    covered += j.shard.correctness_count;
  }
  CHECK(covered == 10);
  // Finished out of order: the merge puts the records back in input order.
  CHECK(t.finish(echoed(jobs[2])) == job_table::verdict::shard);
  CHECK(t.finish(echoed(jobs[0])) == job_table::verdict::shard);
  CHECK(t.finish(echoed(jobs[0])) == job_table::verdict::stale);
  CHECK(t.finish(echoed(jobs[1])) == job_table::verdict::terminal);
  CHECK(t.state_of(id) == job_table::state::reviewing);
  auto merged = t.merged(id);
  CHECK(merged.job_id == id);
  CHECK(merged.shards == 3);
  REQUIRE(merged.correctness.size() == 10);
  for (size_t i = 0; i < 10; ++i)
    CHECK(merged.correctness[i].args == "i" + std::to_string(i));
}

TEST_CASE("a shard longer than the queue's share per slot is cut at dispatch, longest first",
          "[actors]") {
  job_table t(2);
  t.split_at_dispatch(true);
  auto big = t.add({"aten.a.default", numbered(8), numbered(8)}, 1, plan_of(8, 0.0));
  auto small = t.add({"aten.b.default", numbered(2), numbered(2)}, 1, plan_of(2, 0.0));
  t.set_artefact(small, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  t.set_artefact(big, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  // 10 s queued over 2 slots: the 8 s operator goes out as its first 5 inputs.
  auto first = t.next(2);
  REQUIRE(first);
  CHECK(first->op_name == "aten.a.default");
  CHECK(first->correctness_inputs.size() == 5);
  CHECK(first->shard.correctness_begin == 0);
  // 5 s left over 2 slots: 2 of the 3 s left of it.
  auto second = t.next(2);
  REQUIRE(second);
  CHECK(second->op_name == "aten.a.default");
  CHECK(second->correctness_inputs.size() == 2);
  CHECK(second->shard.correctness_begin == 5);
  // 3 s left: the other operator (2 s, the longest now) goes out one input at a time.
  auto third = t.next(2);
  REQUIRE(third);
  CHECK(third->op_name == "aten.b.default");
  CHECK(third->correctness_inputs.size() == 1);
  auto fourth = t.next(2);
  REQUIRE(fourth);
  CHECK(fourth->shard.correctness_begin == 7);
  auto fifth = t.next(2);
  REQUIRE(fifth);
  CHECK(fifth->op_name == "aten.b.default");
  CHECK(fifth->shard.correctness_begin == 1);
  CHECK_FALSE(t.next(2));
  CHECK(t.sharded(big));
  CHECK(t.sharded(small));
}

TEST_CASE("each shard has its own fault bounds, and a revised version runs every shard again", "[actors]") {
  job_table t(2);
  auto id = t.add({"aten.a.default", numbered(4), numbered(4)}, 1, plan_of(4, 2.0));
  t.set_artefact(id, {bb::kernel_kind::py, "v1.py", "", "h1", "", "", ""});
  auto a = *t.next();
  auto b = *t.next();
  CHECK(t.finish(ended(a, outcome::crashed)) == job_table::verdict::retry);
  CHECK(t.finish(ended(b, outcome::crashed)) == job_table::verdict::retry);
  auto a2 = *t.next();
  CHECK(a2.job_id == a.job_id);
  CHECK(a2.attempt == 2);
  CHECK(t.finish(ended(a2, outcome::crashed)) == job_table::verdict::shard);
  auto b2 = *t.next();
  CHECK(t.finish(echoed(b2)) == job_table::verdict::terminal);
  // One shard crashed for good: the operator fails as an unsharded job would, every input.
  auto merged = t.merged(id);
  CHECK(merged.outcome == outcome::crashed);
  CHECK(t.revise(id) == 2);
  CHECK_FALSE(t.next());
  t.set_artefact(id, {bb::kernel_kind::py, "v2.py", "", "h2", "", "", ""});
  std::vector<eval_job> v2;
  while (auto j = t.next())
    v2.push_back(*j);
  REQUIRE(v2.size() == 2);
  for (auto& j : v2) {
    CHECK(j.kernel.path == "v2.py");
    CHECK(t.finish(echoed(j)) != job_table::verdict::retry);
  }
  CHECK(t.merged(id).outcome == outcome::ok);
  t.close(id);
  CHECK(t.all_done());
}

TEST_CASE("plans cut operators by the sweep's expected work per slot, on one slot only when bounded",
          "[actors]") {
  suite s;
  s.ops.push_back({"aten.a.default", numbered(30), numbered(30)});
  s.ops.push_back({"aten.b.default", numbered(10), numbered(10)});
  auto many = plan_operators(s, {}, {}, 4, 2.0);
  REQUIRE(many.size() == 2);
  CHECK(many[0].target_seconds == Approx(40.0 / 4 / 2));
  CHECK(many[0].work.seconds.size() == 30);
  auto one = plan_operators(s, {}, {}, 1, 2.0);
  CHECK(one[0].target_seconds == 0.0);
  auto off = plan_operators(s, {}, {}, 4, 0.0);
  CHECK(off[1].target_seconds == 0.0);
  // With a bound on a shard's work, one slot cuts too: 30 one-second inputs in shards of at
  // most 8 seconds, every input in exactly one, in order.
  auto bounded = plan_operators(s, {}, {}, 1, 2.0, 8.0);
  CHECK(bounded[0].target_seconds == Approx(8.0));
  job_table table(2);
  auto id = table.add(s.ops[0], 1, bounded[0]);
  table.set_artefact(id, {bb::kernel_kind::aten, "", "", "aten", "", "", ""});
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  while (auto job = table.next()) {
    CHECK(job->shard.correctness_count <= 8);
    CHECK(job->correctness_inputs.size() == job->shard.correctness_count);
    spans.emplace_back(job->shard.correctness_begin, job->shard.correctness_count);
  }
  std::sort(spans.begin(), spans.end());
  uint32_t next = 0;
  for (auto& [begin, count] : spans) {
    CHECK(begin == next);
    next += count;
  }
  CHECK(next == 30);
  CHECK(spans.size() == 4);
}
