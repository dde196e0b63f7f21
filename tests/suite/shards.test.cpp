#include <catch2/catch.hpp>

#include "suite/shards.hpp"

using namespace bb;

namespace {

runner_options cuda() {
  runner_options o;
  o.device = "cuda";
  return o;
}

} // namespace

TEST_CASE("an input's expected seconds follow the timer's budget", "[suite]") {
  auto gpu = cuda();
  // A cheap call: about do_bench's warm-up and repetition budgets on each side.
  auto cheap = expected_input_seconds(0.01, gpu, true);
  CHECK(cheap > 2 * (gpu.gpu_rep_ms) / 1000.0);
  CHECK(cheap < 2 * (gpu.gpu_warmup_ms + gpu.gpu_rep_ms + 20) / 1000.0);
  // A call longer than the budgets: at least the estimate's six calls and one of each kind.
  CHECK(expected_input_seconds(1000.0, gpu, true) > 2 * 8.0);
  // Unless timed, only the check: the reference, the kernel, building and comparing.
  CHECK(expected_input_seconds(10.0, gpu, false) < 0.05);
  // On a CPU, cpu_bench's calls within timing.cpu_max_seconds.
  runner_options cpu;
  cpu.cpu_max_seconds = 0.5;
  CHECK(expected_input_seconds(100.0, cpu, true) < 2 * (0.5 + 0.125 + 0.2) + 0.5);
  cpu.cpu_max_seconds = 0;
  CHECK(expected_input_seconds(1.0, cpu, true) == Approx(2 * 110 * 0.001 + 0.005));
}

TEST_CASE("calls are estimated from tensor bytes, or taken from measured times", "[suite]") {
  auto small = call_ms_from_bytes("((T([2], f32),), {})", "cuda");
  auto large = call_ms_from_bytes("((T([8192, 8192], f32),), {})", "cuda");
  CHECK(small == Approx(0.01));
  CHECK(large == Approx(2.0 * 8192 * 8192 * 4 / 2.0e9));
  CHECK(call_ms_from_bytes("((T([8192, 8192], f32),), {})", "cpu") > 100 * large);
  op_inputs op{"aten.relu.default", {"((T([2], f32),), {})", "((T([4], f32),), {})"}, {}};
  op.performance = op.correctness;
  auto guessed = estimate_work(op, cuda(), {});
  auto measured = estimate_work(op, cuda(), {{{"aten.relu.default", "((T([4], f32),), {})"}, 500.0}});
  REQUIRE(measured.seconds.size() == 2);
  CHECK(measured.paired);
  CHECK(measured.seconds[0] == Approx(guessed.seconds[0]));
  CHECK(measured.seconds[1] > 10 * guessed.seconds[1]);
}

TEST_CASE("units are paired inputs, or correctness inputs then performance inputs", "[suite]") {
  op_work paired = uniform_work({"aten.a.default", {"p", "q", "r"}, {"p", "q", "r"}});
  CHECK(paired.seconds.size() == 3);
  auto s = span_of(paired, {1, 3});
  CHECK(s.correctness_begin == 1);
  CHECK(s.correctness_count == 2);
  CHECK(s.performance_begin == 1);
  CHECK(s.performance_count == 2);
  CHECK(s.is_part());
  CHECK(units_of(paired, s) == std::vector<unit_range>{{1, 3}});
  CHECK_FALSE(span_of(paired, {0, 3}).is_part());

  op_work apart = uniform_work({"aten.a.default", {"c0", "c1", "c2"}, {"p0", "p1"}});
  CHECK(apart.seconds.size() == 5);
  auto across = span_of(apart, {2, 4});
  CHECK(across.correctness_begin == 2);
  CHECK(across.correctness_count == 1);
  CHECK(across.performance_begin == 0);
  CHECK(across.performance_count == 1);
  CHECK(units_of(apart, across) == std::vector<unit_range>{{2, 3}, {3, 4}});
  CHECK(span_text(across) == "inputs 3-3 of 3, performance inputs 1-1 of 2");
  CHECK(units_left(apart, {{0, 1}, {2, 4}}) == std::vector<unit_range>{{1, 2}, {4, 5}});
}

TEST_CASE("an operator is cut into shards of nearly equal expected work", "[suite]") {
  op_work w;
  w.paired = true;
  w.correctness = w.performance = 8;
  w.seconds = {5, 1, 1, 1, 1, 1, 1, 1};
  auto cuts = cut_shards(w, {{0, 8}}, 4.0);
  // 12 s at most about 4 s a shard: three shards, the long first input on its own.
  REQUIRE(cuts.size() == 3);
  CHECK(cuts[0] == unit_range{0, 1});
  CHECK(cuts[1].begin == 1);
  CHECK(cuts[2].end == 8);
  CHECK(seconds_of(w, cuts[1]) + seconds_of(w, cuts[2]) == Approx(7));
  CHECK(std::abs(seconds_of(w, cuts[1]) - seconds_of(w, cuts[2])) <= 1);
  // No target: one shard per run; a run never spans a gap.
  CHECK(cut_shards(w, {{0, 3}, {5, 8}}, 0.0) == std::vector<unit_range>{{0, 3}, {5, 8}});
  CHECK(cut_shards(w, {{0, 2}}, 0.1).size() == 2);
  CHECK(head_within(w, {1, 8}, 3.5) == unit_range{1, 4});
  CHECK(head_within(w, {0, 8}, 1.0) == unit_range{0, 1});
  CHECK(shard_target(100.0, 10, 2.0) == Approx(5.0));
  CHECK(shard_target(100.0, 1, 2.0) == 0.0);
  // scheduler.max_shard_s bounds a shard, one slot included; shards off stay off.
  CHECK(shard_target(100.0, 1, 2.0, 30.0) == Approx(30.0));
  CHECK(shard_target(100.0, 10, 2.0, 3.0) == Approx(3.0));
  CHECK(shard_target(100.0, 10, 2.0, 30.0) == Approx(5.0));
  CHECK(shard_target(100.0, 1, 0.0, 30.0) == 0.0);
}
