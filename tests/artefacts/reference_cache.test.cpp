#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "artefacts/reference_cache.hpp"
#include "support.hpp"

using namespace bb;

namespace {

provenance h200() {
  provenance p;
  p.node = "n1";
  p.device = "cuda: NVIDIA H200";
  p.driver = "cuda 13.0";
  p.torch_version = "2.11.0";
  return p;
}

runner_options cuda_opts() {
  runner_options o;
  o.device = "cuda";
  return o;
}

} // namespace

TEST_CASE("a reference timing is found again under the same key only", "[artefacts]") {
  test::temp_dir dir;
  reference_cache cache(dir / "refs");
  auto key = reference_cache::key("aten.relu.default", "((T([4], f32),), {})", h200(), cuda_opts());
  CHECK_FALSE(cache.find(key).has_value());
  cached_reference t;
  t.mean_ms = 0.25;
  t.round_means_ms = {0.24, 0.26};
  REQUIRE(cache.store(key, t));
  auto hit = cache.find(key);
  REQUIRE(hit.has_value());
  CHECK(hit->mean_ms == 0.25);
  CHECK(hit->round_means_ms == std::vector<double>{0.24, 0.26});

  // Any part of the key that differs is another measurement.
  auto other_input = reference_cache::key("aten.relu.default", "((T([8], f32),), {})", h200(), cuda_opts());
  auto p = h200();
  p.driver = "cuda 12.8";
  auto other_driver = reference_cache::key("aten.relu.default", "((T([4], f32),), {})", p, cuda_opts());
  p = h200();
  p.torch_version = "2.10.0";
  auto other_torch = reference_cache::key("aten.relu.default", "((T([4], f32),), {})", p, cuda_opts());
  p = h200();
  p.device = "cuda: NVIDIA H100";
  auto other_gpu = reference_cache::key("aten.relu.default", "((T([4], f32),), {})", p, cuda_opts());
  auto o = cuda_opts();
  o.gpu_rep_ms = 50;
  auto other_timer = reference_cache::key("aten.relu.default", "((T([4], f32),), {})", h200(), o);
  for (auto& k : {other_input, other_driver, other_torch, other_gpu, other_timer}) {
    CHECK(k != key);
    CHECK_FALSE(cache.find(k).has_value());
  }
  // Another node with the same kind of GPU shares the entry; on a CPU the node is part of it.
  p = h200();
  p.node = "n2";
  CHECK(reference_cache::key("aten.relu.default", "((T([4], f32),), {})", p, cuda_opts()) == key);
  runner_options cpu;
  auto cpu1 = reference_cache::key("aten.relu.default", "x", h200(), cpu);
  CHECK(reference_cache::key("aten.relu.default", "x", p, cpu) != cpu1);
}

TEST_CASE("a reference timed on fresh inputs has its own key, and without the checks the key is "
          "as before", "[artefacts]") {
  auto checked = cuda_opts();
  REQUIRE(checked.exploit_checks);
  auto plain = cuda_opts();
  plain.exploit_checks = false;
  auto with = reference_cache::key("aten.relu.default", "x", h200(), checked);
  auto without = reference_cache::key("aten.relu.default", "x", h200(), plain);
  CHECK(with != without);
  CHECK_THAT(with, Catch::Contains("\"fresh_inputs\":true"));
  // The key caches written before the checks existed were stored under.
  CHECK(without == "{\"device\":\"cuda: NVIDIA H200\",\"driver\":\"cuda 13.0\","
                   "\"flush_bytes\":268435456,\"gpu_rep_ms\":100.0,\"gpu_warmup_ms\":25.0,"
                   "\"input\":\"x\",\"op\":\"aten.relu.default\",\"rounds\":5,"
                   "\"timer\":\"do_bench\",\"torch\":\"2.11.0\"}");
  // The other checks' settings do not change what the reference's timing means.
  auto other = checked;
  other.suspicious_speedup = 3;
  other.extra_inputs = true;
  CHECK(reference_cache::key("aten.relu.default", "x", h200(), other) == with);
}

TEST_CASE("a torn cache entry counts as none, and a disabled cache keeps nothing", "[artefacts]") {
  test::temp_dir dir;
  reference_cache cache(dir / "refs");
  auto key = reference_cache::key("aten.relu.default", "x", h200(), cuda_opts());
  cached_reference t;
  t.mean_ms = 1.0;
  REQUIRE(cache.store(key, t));
  for (auto& e : std::filesystem::recursive_directory_iterator(dir / "refs"))
    if (e.is_regular_file())
      std::ofstream(e.path(), std::ios::trunc) << "{\"key\": ";
  CHECK_FALSE(cache.find(key).has_value());
  reference_cache off;
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.store(key, t));
  CHECK_FALSE(off.find(key).has_value());
}

TEST_CASE("a job gets the cached references of its inputs, and a result's measured ones are "
          "kept",
          "[artefacts]") {
  test::temp_dir dir;
  reference_cache cache(dir / "refs");
  auto opts = cuda_opts();
  eval_job job;
  job.op_name = "aten.relu.default";
  job.performance_inputs = {"a", "b"};
  eval_result r;
  r.where = h200();
  r.performance.resize(2);
  r.performance[1].successfully_ran = true;
  r.performance[1].reference_time_ms = 2.0;
  r.performance[1].reference_round_means_ms = {1.9, 2.1};
  keep_measured_references(r, job, cache, opts);
  CHECK(r.performance[1].reference_round_means_ms.empty());
  attach_cached_references(job, cache, h200(), opts);
  REQUIRE(job.cached_references.size() == 1);
  CHECK(job.cached_references[0].index == 1);
  CHECK(job.cached_references[0].mean_ms == 2.0);
}
