// The sandbox on a GPU: a sandboxed runner times a kernel as an unsandboxed one does, and a
// runner on slot 0 cannot open another GPU's device node.

#include <catch2/catch.hpp>

#include "skip.hpp"

#include <algorithm>
#include <filesystem>

#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "integration/programs.hpp"
#include "process/sandbox.hpp"
#include "support.hpp"

using nlohmann::json;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

// One sweep of `kernels` (a folder of tests/kernels) over `trace` on one CUDA slot with
// evaluator.sandbox = `mode`: its job_finished lines.
std::vector<json> gpu_sweep(const bb::test::temp_dir& dir, const std::string& kernels,
                            const std::string& trace, const std::string& mode, const std::string& name) {
  bb::test::write_file(dir / (name + ".txt"), trace);
  bb::test::write_file(dir / (name + ".toml"), "[evaluator]\nsandbox = \"" + mode + "\"\n[compile]\n"
                                                   "cache_dir = \"" BB_TEST_CACHE "\"\n");
  auto r = bb::test::run(dir, bbcluster + " --suite torchbench --data " + dir / (name + ".txt")
                                  + " --backend directory --ops-directory " BB_SOURCE_DIR "/tests/kernels/"
                                  + kernels + " --devices 1 --config " + dir / (name + ".toml")
                                  + " --log-dir " + dir / name);
  INFO(r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0));
  REQUIRE(r.status == 0);
  return bb::test::journal_lines(dir / name + "/results.jsonl", "job_finished");
}

} // namespace

TEST_CASE("a sandboxed runner times a kernel within 2% of an unsandboxed one", "[gpu]") {
  if (bb::count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  REQUIRE(bb::sandbox_unavailable().empty());
  bb::test::temp_dir dir;
  // A 256 MiB relu: long enough on a GPU for do_bench to time it to well under 1%.
  auto trace = std::string("Operator: aten.relu.default\ncnt: 1, ((T([8192, 8192], f32),), {})\n");
  std::vector<double> bare, boxed;
  for (int round = 0; round < 3; ++round)
    for (std::string mode : {"off", "required"}) {
      auto jobs = gpu_sweep(dir, "gpu_triton", trace, mode, mode + std::to_string(round));
      REQUIRE(jobs.size() == 1);
      INFO(jobs[0].dump().substr(0, 2000));
      REQUIRE(jobs[0]["outcome"] == "ok");
      CHECK(jobs[0]["provenance"]["sandbox"] == (mode == "off" ? "off" : "namespaces"));
      REQUIRE(jobs[0]["correctness"][0]["is_correct"] == true);
      (mode == "off" ? bare : boxed).push_back(jobs[0]["performance"][0]["benchmark_time_ms"].get<double>());
    }
  std::sort(bare.begin(), bare.end());
  std::sort(boxed.begin(), boxed.end());
  // Printed on every run: the figure the sandbox issue asks for.
  WARN("median kernel time: bare " << bare[1] << " ms, sandboxed " << boxed[1] << " ms");
  CHECK(std::abs(boxed[1] / bare[1] - 1.0) < 0.02);
}

TEST_CASE("a sandboxed runner on GPU slot 0 cannot open another GPU's device node", "[gpu]") {
  // Needs a /dev/nvidiaN besides the slot's /dev/nvidia0: a second GPU, or on a one-GPU
  // machine a second node of the same GPU made by root beforehand (`mknod /dev/nvidia1 c 195 0`,
  // as scripts/gpu-check.sh does), which the sandbox must hide just the same.
  if (bb::count_gpus() == 0 || !std::filesystem::exists("/dev/nvidia1")) {
    BB_SKIP("no /dev/nvidia1 on this machine: [gpu] test skipped");
  }
  struct stat gpu0{}, gpu1{};
  if (::stat("/dev/nvidia0", &gpu0) == 0 && ::stat("/dev/nvidia1", &gpu1) == 0 && gpu0.st_rdev == gpu1.st_rdev)
    WARN("/dev/nvidia1 is a second node of GPU 0 (a one-GPU machine)");
  REQUIRE(bb::sandbox_unavailable().empty());
  bb::test::temp_dir dir;
  // The escape corpus's trunc kernel opens every /dev/nvidiaN but its own and says so.
  auto trace = std::string("Operator: aten.trunc.default\ncnt: 1, ((T([4, 8], f32),), {})\n");
  auto off = gpu_sweep(dir, "escape", trace, "off", "off");
  REQUIRE(off.size() == 1);
  INFO(off[0].dump().substr(0, 2000));
  // Without the sandbox the kernel opens the other GPUs' nodes: the test can see an escape.
  CHECK(off[0]["correctness"][0]["error_msg"].get<std::string>().find("ESCAPED: opened /dev/nvidia1")
        != std::string::npos);
  auto boxed = gpu_sweep(dir, "escape", trace, "required", "boxed");
  REQUIRE(boxed.size() == 1);
  INFO(boxed[0].dump().substr(0, 2000));
  CHECK(boxed[0]["outcome"] == "ok");
  CHECK(boxed[0]["provenance"]["sandbox"] == "namespaces");
  CHECK(boxed[0]["correctness"][0]["is_correct"] == true);
}
