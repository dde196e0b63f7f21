#include <catch2/catch.hpp>

#include "skip.hpp"

#include <filesystem>
#include <sstream>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "support.hpp"

using nlohmann::json;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

// bbcluster with `args`, its run folder dir/name: the journal's first line.
json first_result(const bb::test::temp_dir& dir, const std::string& args, const std::string& name) {
  auto logs = dir / name;
  auto line = bbcluster + " " + args + " --log-dir " + logs + " >" + dir / "stdout" + " 2>" + dir / (name + ".err")
              + " </dev/null";
  int raw = std::system(line.c_str());
  INFO(bb::test::read_file(dir / (name + ".err")));
  REQUIRE(WIFEXITED(raw));
  REQUIRE(WEXITSTATUS(raw) == 0);
  std::istringstream journal(bb::test::read_file(logs + "/results.jsonl"));
  std::string first;
  std::getline(journal, first);
  return json::parse(first);
}

json run_relu_sweep(const bb::test::temp_dir& dir, const std::string& kernels, const std::string& name) {
  bb::test::write_file(dir / "relu.txt", "Operator: aten.relu.default\n"
                                         "cnt: 1, ((T([4096, 4096], f16),), {})\n"
                                         "cnt: 1, ((T([64, 128, 512], f32),), {})\n");
  bb::test::write_file(dir / "settings.toml", "[compile]\ncache_dir = \"" BB_TEST_CACHE "\"\n");
  return first_result(dir,
                      "--suite torchbench --data " + dir / "relu.txt" + " --backend directory --ops-directory "
                        BB_SOURCE_DIR "/tests/kernels/" + kernels + " --devices 1 --config " + dir / "settings.toml",
                      name);
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

namespace {

// One sweep of relu over small inputs (launch-bound: microseconds of device work) with
// `flags`; the journal's line.
json run_small_relu(const bb::test::temp_dir& dir, const std::string& flags, const std::string& name) {
  bb::test::write_file(dir / "small_relu.txt", "Operator: aten.relu.default\n"
                                               "cnt: 1, ((T([4096], f32),), {})\n"
                                               "cnt: 1, ((T([64, 256], f16),), {})\n");
  return first_result(dir, "--suite torchbench --data " + dir / "small_relu.txt" + " --devices 1 " + flags, name);
}

// A relu kernel in the directory backend's layout, with `body` as its function's body.
std::string relu_kernel_folder(const bb::test::temp_dir& dir, const std::string& name, const std::string& body) {
  // Apart from the run folders, which take the same names.
  auto folder = dir / ("kernels_" + name);
  std::filesystem::create_directories(folder + "/relu");
  bb::test::write_file(folder + "/relu/relu_implementation_v1.py",
                       "import torch\n_memo = {}\n\ndef relu_kernel_impl(x):\n" + body);
  return "--backend directory --ops-directory " + folder;
}

} // namespace

TEST_CASE("the cudagraph timer: aten against itself is 1.00, an uncapturable call falls back, a replay is caught",
          "[gpu]") {
  if (bb::count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  bb::test::temp_dir dir;
  // aten against itself, timed on graph replays: equal, each record naming the timer.
  auto aten = run_small_relu(dir, "--backend aten --timer cudagraph --no-reference-cache", "aten");
  INFO(aten.dump().substr(0, 3000));
  CHECK(aten["outcome"] == "ok");
  REQUIRE(aten["performance"].size() == 2);
  for (auto& p : aten["performance"]) {
    CHECK(p["successfully_ran"] == true);
    CHECK(p["timer"] == "cudagraph");
    CHECK(p["speedup"].get<double>() > 0.9);
    CHECK(p["speedup"].get<double>() < 1.1);
    // The device's time of a 16 KiB relu: a few microseconds, not the launch's tens.
    CHECK(p["benchmark_time_ms"].get<double>() < 0.05);
  }
  // A call that synchronizes cannot be captured: timed with do_bench, and the record says so.
  auto sync = run_small_relu(dir, relu_kernel_folder(dir, "sync", "    torch.cuda.synchronize()\n    return torch.relu(x)\n")
                                    + " --timer cudagraph --no-reference-cache", "sync");
  INFO(sync.dump().substr(0, 3000));
  for (auto& c : sync["correctness"])
    CHECK(c["is_correct"] == true);
  for (auto& p : sync["performance"]) {
    CHECK(p["successfully_ran"] == true);
    CHECK(p["timer"] == "do_bench");
  }
  // A kernel that answers from its memo by pointer: the graph captured no work, and the timed
  // calls' checked outputs are not relu's of their fresh values.
  auto memo = run_small_relu(dir, relu_kernel_folder(dir, "memo",
                                                     "    key = (x.data_ptr(), tuple(x.shape))\n"
                                                     "    if key not in _memo:\n"
                                                     "        _memo[key] = torch.relu(x)\n"
                                                     "    return _memo[key]\n")
                                    + " --timer cudagraph --no-reference-cache", "memo");
  INFO(memo.dump().substr(0, 3000));
  bool caught = false;
  for (auto& p : memo["performance"])
    caught = caught || p["error_msg"].get<std::string>().find("timed call") != std::string::npos;
  CHECK(caught);
  auto flags = memo["flags"].dump();
  CHECK(flags.find("wrong_in_timed_calls") != std::string::npos);
  // A kernel that can tell it is being captured, and captures no work the first time (the
  // graph of even rounds): each round's graph has its own outputs, checked.
  auto first_empty = run_small_relu(dir, relu_kernel_folder(dir, "first_empty",
                                                            "    if torch.cuda.is_current_stream_capturing():\n"
                                                            "        _memo['captures'] = _memo.get('captures', 0) + 1\n"
                                                            "        if _memo['captures'] % 2 == 1:\n"
                                                            "            return torch.empty_like(x)\n"
                                                            "    return torch.relu(x)\n")
                                          + " --timer cudagraph --no-reference-cache", "first_empty");
  INFO(first_empty.dump().substr(0, 3000));
  CHECK(first_empty["flags"].dump().find("wrong_in_timed_calls") != std::string::npos);
}
