#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "programs.hpp"

using nlohmann::json;
using bb::test::journal_lines;
using bb::test::run;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

// Operators of many small inputs with Python kernels that pass some inputs and fail others
// in every way a verdict can: wrong values on half-precision inputs, an exception on long
// inputs, a kernel that does not load, an input whose reference rejects it.
std::string many_inputs_trace() {
  std::string t = "Operator: aten.relu.default\n";
  for (int n = 1; n <= 12; ++n)
    t += "cnt: 1, ((T([" + std::to_string(n * 8) + "], f32),), {})\n";
  t += "Operator: aten.abs.default\n";
  for (int n = 1; n <= 10; ++n)
    t += "cnt: 1, ((T([" + std::to_string(n * 4) + "], " + (n % 3 ? "f32" : "f16") + "),), {})\n";
  t += "Operator: aten.neg.default\n";
  for (int n = 1; n <= 9; ++n)
    t += "cnt: 1, ((T([" + std::to_string(n * 300) + "], f32),), {})\n";
  t += "Operator: aten.sin.default\ncnt: 1, ((T([8], f32),), {})\ncnt: 1, ((T([16], f32),), {})\n"
       "cnt: 1, ((T([24], f32),), {})\n";
  t += "Operator: aten.mm.default\ncnt: 1, ((T([4, 4], f32), T([4, 4], f32)), {})\n"
       "cnt: 1, ((T([2, 3], f32), T([4, 5], f32)), {})\ncnt: 1, ((T([8, 2], f32), T([2, 8], f32)), {})\n"
       "cnt: 1, ((T([3, 3], f32), T([3, 3], f32)), {})\n";
  return t;
}

void write_kernels(const bb::test::temp_dir& dir) {
  auto kernel = [&](const std::string& folder, const std::string& code) {
    std::filesystem::create_directories(dir / ("kernels/" + folder));
    bb::test::write_file(dir / ("kernels/" + folder + "/" + folder + "_implementation_v1.py"), code);
  };
  kernel("relu__default", "import torch\ndef relu__default_kernel_impl(x):\n    return torch.clamp(x, min=0)\n");
  kernel("abs__default", "import torch\ndef abs__default_kernel_impl(x):\n"
                         "    return torch.abs(x) + (1 if x.dtype == torch.float16 else 0)\n");
  kernel("neg__default", "import torch\ndef neg__default_kernel_impl(x):\n"
                         "    if x.numel() > 1500:\n        raise ValueError('too long')\n    return -x\n");
  kernel("sin__default", "def sin__default_kernel_impl(x:\n    pass\n");
  kernel("mm__default", "import torch\ndef mm__default_kernel_impl(a, b):\n    return a @ b\n");
}

// A sweep over three CPU slots; `scheduler` is the [scheduler] section.
bb::test::run_result sweep(const bb::test::temp_dir& dir, const std::string& name, const std::string& scheduler,
                           int slots = 3) {
  bb::test::write_file(dir / (name + ".toml"), "[timing]\ncpu_warmup = 1\ncpu_runs = 2\ncpu_max_seconds = 0.2\n"
                                                   "reference_cache = false\n[scheduler]\n" + scheduler);
  return run(dir, bbcluster + " --suite torchbench --data " + dir / "trace.txt" + " --backend directory"
                    " --ops-directory " + dir / "kernels" + " --devices " + std::to_string(slots) + " --config "
                    + dir / (name + ".toml") + " --log-dir " + dir / name);
}

// The records of each operator's final result, in order, without what timing measured (and
// with a traceback's first line only: aten's carry the addresses of the process that raised).
// A speedup over checks.suspicious_speedup is timed again, stricter: on this loaded machine a
// reference call preempted mid-round does that, so its flag and the first figure are timings too.
std::map<std::string, json> records_without_timings(const std::string& journal) {
  std::map<std::string, json> out;
  for (auto& j : journal_lines(journal, "job_finished")) {
    for (auto& c : j["correctness"]) {
      auto trace = c["traceback"].get<std::string>();
      c["traceback"] = trace.substr(0, trace.find('\n'));
    }
    json perf = json::array();
    for (auto p : j["performance"]) {
      for (auto key : {"speedup", "benchmark_time_ms", "reference_time_ms", "speedup_ci_low",
                       "speedup_ci_high", "timing_rounds", "reference_cached", "timer",
                       "unverified_speedup"})
        p.erase(key);
      perf.push_back(p);
    }
    json flags = json::array();
    for (auto& f : j["flags"])
      if (f != "suspicious_speedup")
        flags.push_back(f);
    out[j["op_name"]] = {{"outcome", j["outcome"]}, {"detail", j["detail"]}, {"flags", flags},
                         {"correctness", j["correctness"]}, {"performance", perf}};
  }
  return out;
}

// What bbcluster printed, without the score lines that speedups (timings) decide.
std::string scores_without_timings(const std::string& out) {
  std::istringstream in(out);
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("performance score", 0) != 0 && line.rfind("perf@p", 0) != 0)
      kept += line + "\n";
  return kept;
}

} // namespace

TEST_CASE("a sharded sweep gives the records, order and correctness score of an unsharded one, and a "
          "resume runs only the shards it lacks", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "trace.txt", many_inputs_trace());
  write_kernels(dir);
  auto whole = sweep(dir, "whole", "shards = \"off\"\n");
  INFO(whole.err);
  REQUIRE(whole.status == 0);
  auto sharded = sweep(dir, "sharded", "shards = \"auto\"\nshards_per_slot = 4.0\n");
  INFO(sharded.err);
  REQUIRE(sharded.status == 0);
  CHECK(journal_lines(dir / "whole/results.jsonl", "shard_finished").empty());
  auto shard_lines = journal_lines(dir / "sharded/results.jsonl", "shard_finished");
  CHECK(shard_lines.size() >= 8);

  auto expected = records_without_timings(dir / "whole/results.jsonl");
  REQUIRE(expected.size() == 5);
  CHECK(records_without_timings(dir / "sharded/results.jsonl") == expected);
  // The verdicts are mixed, as the kernels were written to make them.
  CHECK(expected["aten.sin.default"]["outcome"] == "exception");
  CHECK(expected["aten.abs.default"]["correctness"][0]["is_correct"] == true);
  CHECK(expected["aten.mm.default"]["correctness"][2]["error_type"] == "reference_error");
  CHECK(expected["aten.neg.default"]["correctness"][0]["error_type"] == "ValueError");
  // Scores: the correctness score and the skipped operators are the same; speedups are timings.
  CHECK(scores_without_timings(sharded.out) == scores_without_timings(whole.out));
  CHECK(scores_without_timings(whole.out).find("correctness score (mean pass rate over all operators): 0.40") == 0);

  // Resumed after a kill: no operator finished, half its shards' lines lost.
  {
    auto resumed = dir / "resumed";
    std::filesystem::copy(dir / "sharded", resumed, std::filesystem::copy_options::recursive);
    std::string journal;
    std::set<std::string> kept_once;
    std::map<std::string, std::vector<std::pair<int, int>>> kept;
    for (auto& j : shard_lines) {
      auto op = j["op_name"].get<std::string>();
      // Every shard of neg stays (it is concluded at once); of the others, every other one.
      if (op != "aten.neg.default" && !kept_once.insert(op).second) {
        kept_once.erase(op);
        continue;
      }
      kept[op].emplace_back(j["shard"]["correctness_begin"], j["shard"]["correctness_count"]);
      journal += j.dump() + "\n";
    }
    for (auto& j : journal_lines(dir / "sharded/results.jsonl", "job_finished"))
      if (!kept.count(j["op_name"]))
        journal += j.dump() + "\n"; // the operators evaluated as one job stay finished
    bb::test::write_file(resumed + "/results.jsonl", journal);
    auto before = journal_lines(resumed + "/results.jsonl").size();
    auto r = run(dir, bbcluster + " --resume " + resumed);
    INFO(r.err);
    REQUIRE(r.status == 0);
    auto lines = journal_lines(resumed + "/results.jsonl");
    // The new shards cover exactly the inputs whose lines were lost.
    size_t fresh = 0;
    for (size_t i = before; i < lines.size(); ++i) {
      if (lines[i]["event"] != "shard_finished")
        continue;
      ++fresh;
      auto op = lines[i]["op_name"].get<std::string>();
      CHECK(op != "aten.neg.default");
      int b = lines[i]["shard"]["correctness_begin"], n = lines[i]["shard"]["correctness_count"];
      for (auto [kb, kn] : kept[op]) {
        INFO(op << " " << b << "+" << n << " against " << kb << "+" << kn);
        CHECK((b + n <= kb || kb + kn <= b));
      }
    }
    CHECK(fresh > 0);
    CHECK(r.err.find("go on from the shards they finished") != std::string::npos);
    CHECK(records_without_timings(resumed + "/results.jsonl") == expected);
    CHECK(scores_without_timings(r.out) == scores_without_timings(whole.out));
  }
}

TEST_CASE("three local nodes with simulated runners: a node killed mid-sweep costs only the shards "
          "it held", "[integration]") {
  bb::test::temp_dir dir;
  std::string trace;
  for (auto op : {"aten.relu.default", "aten.abs.default", "aten.neg.default"}) {
    trace += std::string("Operator: ") + op + "\n";
    for (int n = 1; n <= 40; ++n)
      trace += "cnt: 1, ((T([" + std::to_string(n * 64) + "], f32),), {})\n";
  }
  bb::test::write_file(dir / "trace.txt", trace);
  bb::test::write_file(dir / "hosts.txt", "node-a slots=2\nnode-b slots=2\nnode-c slots=2\n");
  bb::test::write_file(dir / "settings.toml",
                       "[evaluator]\ndevice = \"cuda\"\nrunner = \"" BB_BIN_DIR "/sim_runner\"\nsandbox = \"off\"\n"
                       "[timing]\nreference_cache = false\n[nodes]\nheartbeat_s = 0.3\nsilence_s = 1.5\n");
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen((dir / "stdout").c_str(), "w", stdout);
    std::freopen((dir / "stderr").c_str(), "w", stderr);
    ::execl(bbcluster.c_str(), "bbcluster", "--suite", "torchbench", "--data", (dir / "trace.txt").c_str(),
            "--nodes", (dir / "hosts.txt").c_str(), "--launcher", "local", "--config",
            (dir / "settings.toml").c_str(), "--log-dir", (dir / "run").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // About 30 s of modelled work over 6 slots: the kill comes after the first shards.
  for (int i = 0; i < 400 && journal_lines(dir / "run/results.jsonl", "shard_finished").size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  std::vector<pid_t> victims;
  for (auto p : bb::test::children_named(pid, "bbnode"))
    if (bb::test::read_file("/proc/" + std::to_string(p) + "/cmdline").find("node-c") != std::string::npos)
      victims.push_back(p);
  REQUIRE(victims.size() == 1);
  ::kill(victims.front(), SIGKILL);
  auto rc = bb::test::wait_exit(pid, 120);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err.substr(err.size() > 5000 ? err.size() - 5000 : 0));
  REQUIRE(rc == 0);
  auto lines = journal_lines(dir / "run/results.jsonl");
  size_t requeued = 0;
  std::map<std::string, size_t> finished;
  for (auto& j : lines) {
    if (j["event"] == "job_requeued") {
      ++requeued;
      CHECK(j["detail"].get<std::string>().find("lost") != std::string::npos);
      CHECK(j.contains("shard"));
    }
    if (j["event"] == "job_finished") {
      CHECK(j["outcome"] == "ok");
      finished[j["op_name"]] = j["correctness"].size();
    }
  }
  // At most the two shards the lost node held ran again; every input is reported once.
  CHECK(requeued >= 1);
  CHECK(requeued <= 2);
  CHECK(finished == std::map<std::string, size_t>{{"aten.abs.default", 40}, {"aten.neg.default", 40},
                                                  {"aten.relu.default", 40}});
  CHECK(err.find("lost (silent for") != std::string::npos);
}

TEST_CASE("on one slot, scheduler.max_shard_s cuts long operators into shards with the records of one job",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "trace.txt", many_inputs_trace());
  write_kernels(dir);
  auto whole = sweep(dir, "whole", "max_shard_s = 0\n", 1);
  INFO(whole.err);
  REQUIRE(whole.status == 0);
  CHECK(journal_lines(dir / "whole/results.jsonl", "shard_finished").empty());
  // A bound below one input's expected work: every input of a long operator a shard of its own.
  auto bounded = sweep(dir, "bounded", "max_shard_s = 0.001\n", 1);
  INFO(bounded.err);
  REQUIRE(bounded.status == 0);
  auto shard_lines = journal_lines(dir / "bounded/results.jsonl", "shard_finished");
  CHECK(shard_lines.size() >= 12);
  for (auto& line : shard_lines)
    CHECK(line["correctness"].size() <= 1);
  auto expected = records_without_timings(dir / "whole/results.jsonl");
  REQUIRE(expected.size() == 5);
  CHECK(records_without_timings(dir / "bounded/results.jsonl") == expected);
  CHECK(scores_without_timings(bounded.out) == scores_without_timings(whole.out));
}
