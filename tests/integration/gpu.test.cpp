#include <catch2/catch.hpp>

#include "skip.hpp"

#include <sstream>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "support.hpp"

using nlohmann::json;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

json run_relu_sweep(const bb::test::temp_dir& dir, const std::string& kernels, const std::string& name) {
  bb::test::write_file(dir / "relu.txt", "Operator: aten.relu.default\n"
                                         "cnt: 1, ((T([4096, 4096], f16),), {})\n"
                                         "cnt: 1, ((T([64, 128, 512], f32),), {})\n");
  bb::test::write_file(dir / "settings.toml", "[compile]\ncache_dir = \"" BB_TEST_CACHE "\"\n");
  auto logs = dir / name;
  auto line = bbcluster + " --suite torchbench --data " + dir / "relu.txt"
              + " --backend directory --ops-directory " BB_SOURCE_DIR "/tests/kernels/" + kernels
              + " --devices 1 --config " + dir / "settings.toml" + " --log-dir " + logs + " >"
              + dir / "stdout" + " 2>" + dir / "stderr" + " </dev/null";
  int raw = std::system(line.c_str());
  INFO(bb::test::read_file(dir / "stderr"));
  REQUIRE(WIFEXITED(raw));
  REQUIRE(WEXITSTATUS(raw) == 0);
  std::istringstream journal(bb::test::read_file(logs + "/results.jsonl"));
  std::string first;
  std::getline(journal, first);
  return json::parse(first);
}

void check_relu(const json& r) {
  INFO(r.dump().substr(0, 2000));
  CHECK(r["outcome"] == "ok");
  CHECK(r["provenance"]["device"].get<std::string>().rfind("cuda: ", 0) == 0);
  REQUIRE(r["correctness"].size() == 2);
  for (auto& c : r["correctness"])
    CHECK(c["is_correct"] == true);
  for (auto& p : r["performance"]) {
    CHECK(p["successfully_ran"] == true);
    // CUDA event times of a 32 MiB relu: microseconds, not the milliseconds of a CPU.
    CHECK(p["benchmark_time_ms"].get<double>() > 0.0);
    CHECK(p["benchmark_time_ms"].get<double>() < 1.0);
    CHECK(p["reference_time_ms"].get<double>() < 1.0);
  }
}

} // namespace

TEST_CASE("a .cu relu and a Triton relu, evaluated with the CUDA timer", "[gpu]") {
  if (bb::count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  bb::test::temp_dir dir;
  check_relu(run_relu_sweep(dir, "gpu", "cu"));
  check_relu(run_relu_sweep(dir, "gpu_triton", "triton"));
}
