#include <catch2/catch.hpp>

#include "results/results.hpp"

using namespace bb;

namespace {

// A shard of an operator of `total` paired inputs named x0, x1, ...: inputs [begin, begin+n).
eval_result shard_of(uint32_t begin, uint32_t n, uint32_t total, outcome why = outcome::ok) {
  eval_result r;
  r.op_name = "aten.a.default";
  r.outcome = why;
  r.shard = {begin, n, total, begin, n, total};
  r.wall_seconds = 1.0;
  r.phases["time_kernel"] = 0.5;
  for (auto i = begin; i < begin + n; ++i) {
    correctness_record c;
    c.op_name = r.op_name;
    c.args = "x" + std::to_string(i);
    c.is_correct = i != 3;
    r.correctness.push_back(c);
    performance_record p;
    p.args = c.args;
    p.speedup = 2.0;
    p.successfully_ran = true;
    r.performance.push_back(p);
  }
  return r;
}

} // namespace

TEST_CASE("merged shards are an unsharded job's records in input order", "[results]") {
  auto a = shard_of(0, 2, 6), b = shard_of(2, 3, 6), c = shard_of(5, 1, 6);
  b.flags = {"mutates_input"};
  c.flags = {"aliases_input", "mutates_input"};
  auto m = merge_shards({c, a, b});
  CHECK(m.outcome == outcome::ok);
  CHECK(m.shards == 3);
  CHECK_FALSE(m.shard.is_part());
  REQUIRE(m.correctness.size() == 6);
  REQUIRE(m.performance.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(m.correctness[i].args == "x" + std::to_string(i));
    CHECK(m.performance[i].args == "x" + std::to_string(i));
  }
  CHECK_FALSE(m.correctness[3].is_correct);
  CHECK(m.flags == std::vector<std::string>{"mutates_input", "aliases_input"});
  CHECK(m.wall_seconds == Approx(3.0));
  CHECK(m.phases["time_kernel"] == Approx(1.5));
  // The one job of an unsharded operator is its own result.
  auto whole = shard_of(0, 6, 6);
  whole.job_id = 7;
  CHECK(merge_shards({whole}).job_id == 7);
  CHECK(merge_shards({whole}).shards == 0);
}

TEST_CASE("a shard that crashed fails every input, as it fails an unsharded job", "[results]") {
  eval_job job;
  job.op_name = "aten.a.default";
  job.correctness_inputs = job.performance_inputs = {"x2", "x3"};
  job.shard = {2, 2, 4, 2, 2, 4};
  auto crashed = failed_result(job, outcome::crashed, "runner killed by signal 11 (SIGSEGV) during correctness input 3/4");
  CHECK(crashed.shard.correctness_begin == 2);
  auto m = merge_shards({shard_of(0, 2, 4), crashed});
  CHECK(m.outcome == outcome::crashed);
  CHECK(m.detail == crashed.detail);
  REQUIRE(m.correctness.size() == 4);
  for (auto& c : m.correctness) {
    CHECK_FALSE(c.is_correct);
    CHECK(c.error_type == "crashed");
  }
  CHECK(m.correctness[0].args == "x0");
  CHECK(m.performance[1].speedup == 1.0);
  CHECK_FALSE(m.performance[1].successfully_ran);
}

TEST_CASE("a shard whose every reference failed leaves the operator ok unless all did", "[results]") {
  auto refs = shard_of(0, 2, 4, outcome::reference_error);
  CHECK(merge_shards({refs, shard_of(2, 2, 4)}).outcome == outcome::ok);
  CHECK(merge_shards({refs, shard_of(2, 2, 4, outcome::reference_error)}).outcome == outcome::reference_error);
  // A kernel that could not load fails each shard alike: the first one's detail stands.
  auto a = shard_of(0, 2, 4, outcome::exception), b = shard_of(2, 2, 4, outcome::exception);
  a.detail = "load_error: first";
  b.detail = "load_error: second";
  auto m = merge_shards({b, a});
  CHECK(m.outcome == outcome::exception);
  CHECK(m.detail == "load_error: first");
}
