#include <catch2/catch.hpp>

#include <map>
#include <string>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "programs.hpp"

using nlohmann::json;
using bb::test::run;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string bbrunner = BB_BIN_DIR "/bbrunner";


// Every kind of input that cannot count: a reference that rejects its input, an operator this
// torch lacks, a sparse layout, an operator BackendBench skips, and a line that does not parse.
const char* mixed_trace =
  "Operator: aten.relu.default\n"
  "cnt: 2, ((T([64, 32], f32),), {})\n"
  "cnt: 1, ((T([3, 5], f16, stride=(1, 3)),), {})\n"
  "Operator: aten.mm.default\n"
  "cnt: 1, ((T([2, 3], f32), T([4, 5], f32)), {})\n"
  "Operator: aten.no_such_op.default\n"
  "cnt: 1, ((T([2], f32),), {})\n"
  "Operator: aten._sparse_coo_tensor_with_dims_and_tensors.default\n"
  "cnt: 1, ((1, 1, [9, 4], T([1, 5], i64), T([5, 4], f16)), {'dtype': f16, 'layout': "
  "torch.sparse_coo, 'device': 'cuda', 'pin_memory': None})\n"
  "Operator: aten.index_select.default\n"
  "cnt: 1, ((T([4], f32), 0, T([2], i64)), {})\n"
  "Operator: aten.add.Tensor\n"
  "cnt: 1, ((T([2], f32), T([2], f32),, {})\n"
  "cnt: 1, ((T([2, 2], bf16), T([2], bf16)), {'alpha': 2})\n"
  // A number where the schema wants a Tensor, as Python passes it.
  "Operator: aten.div.Tensor\n"
  "cnt: 1, ((T([4, 4], f16), 8.0), {})\n";

} // namespace

TEST_CASE("a torchbench sweep: runnable ops are scored, the rest skipped and said why",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "mixed.txt", mixed_trace);
  auto logs = dir / "run";
  auto r = run(dir, bbcluster + " --suite torchbench --data " + dir / "mixed.txt" + " --log-dir "
                      + logs + " --config " BB_SOURCE_DIR "/tests/fast.toml");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK(r.out.find("2 of 6 operators skipped") != std::string::npos);
  CHECK(r.out.find("aten.mm.default: reference_error") != std::string::npos);
  CHECK(r.out.find("aten.no_such_op.default: unsupported op") != std::string::npos);
  // Sparse COO inputs and outputs are built and compared, as BackendBench does.
  CHECK(r.out.find("aten._sparse_coo_tensor_with_dims_and_tensors.default:") == std::string::npos);
  // The bad line is reported with file, line and column, and left out.
  CHECK(r.err.find("mixed.txt:13:36: expected ") != std::string::npos);
  CHECK(r.err.find("1 operators skipped as BackendBench's torchbench suite skips them") != std::string::npos);

  auto full = json::parse(bb::test::read_file(logs + "/full_results.json"));
  std::set<std::string> args;
  for (auto& row : full)
    if (row["op_name"] == "relu.default")
      args.insert(row["args"].get<std::string>());
  // Written back as BackendBench's serialize_args: trailing comma, strides as a list.
  CHECK(args == std::set<std::string>{"((T([64, 32], f32),), {})", "((T([3, 5], f16, [1, 3]),), {})"});
  auto md = bb::test::read_file(logs + "/OVERALL_SUMMARY.md");
  CHECK(md.find("## Skipped Operators") != std::string::npos);
  CHECK(md.find("| mm.default | reference_error") != std::string::npos);
  CHECK(r.err.find("jobs failed as a whole") == std::string::npos);
}

TEST_CASE("the real hf_train traces: relu's two largest inputs pass on the CPU", "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, bbcluster + " --suite torchbench --data " BB_TRACES_DIR "/hf_train"
                      " --ops relu.default --topn 2 --disable-output-logs --config " BB_SOURCE_DIR
                      "/tests/fast.toml");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK(r.err.find("1 operators selected") != std::string::npos);
  CHECK(r.err.find("2/2 correct") != std::string::npos);
}

TEST_CASE("the list flag prints operators, input counts and schemas without evaluating",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "mixed.txt", mixed_trace);
  auto r = run(dir, bbcluster + " --suite torchbench --data " + dir / "mixed.txt" + " --list");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("aten.relu.default") != std::string::npos);
  CHECK(r.out.find("aten::relu(Tensor self) -> Tensor") != std::string::npos);
  CHECK(r.out.find("unsupported op (not in this torch)") != std::string::npos);
  // An operator the suite skips is not in the table, and is named below it with why.
  auto left_out = r.out.find("operators left out as BackendBench's torchbench suite leaves them out");
  REQUIRE(left_out != std::string::npos);
  CHECK(r.out.substr(0, left_out).find("index_select") == std::string::npos);
  CHECK(r.out.find("index_select", left_out) != std::string::npos);
  CHECK(r.err.find("reporter") == std::string::npos);
}

TEST_CASE("inputs are the same tensors in every runner process, seeded by (op, input)",
          "[integration]") {
  bb::test::temp_dir dir;
  std::string input = "((T([3, 4], f16, stride=(1, 3)), [T([2], i64), None], T([], f32), "
                      "T([0, 2], f32), T([5], b8), T([2], c64)), {})";
  auto once = run(dir, bbrunner + " --print-inputs aten.add.Tensor \"" + input + "\"");
  auto twice = run(dir, bbrunner + " --print-inputs aten.add.Tensor \"" + input + "\"");
  auto other = run(dir, bbrunner + " --print-inputs aten.sub.Tensor \"" + input + "\"");
  REQUIRE(once.status == 0);
  INFO(once.out);
  CHECK(once.out.find("arg 0: sizes [3, 4] strides [1, 3] Half sum ") == 0);
  CHECK(once.out.find("arg 1[1]: None") != std::string::npos);
  CHECK(once.out.find("arg 2: sizes [] strides [] Float") != std::string::npos);
  CHECK(once.out.find("arg 3: sizes [0, 2]") != std::string::npos);
  CHECK(once.out.find("arg 5: sizes [2] strides [1] ComplexFloat") != std::string::npos);
  CHECK(once.out == twice.out);
  CHECK(once.out != other.out);
}

TEST_CASE("a reference that runs past the call timeout leaves its input out, never the kernel's "
          "timed_out",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "slow.txt",
                       "Operator: aten.mm.default\n"
                       "cnt: 1, ((T([5120, 5120], f32), T([5120, 5120], f32)), {})\n"
                       "cnt: 1, ((T([8, 8], f32), T([8, 8], f32)), {})\n"
                       "Operator: aten.relu.default\n"
                       "cnt: 1, ((T([64], f32),), {})\n");
  bb::test::write_file(dir / "settings.toml",
                       "[evaluator]\ncall_timeout_s = 1.0\n[timing]\ncpu_warmup = 1\ncpu_runs = 3\n"
                       "reference_cache = false\n");
  auto logs = dir / "run";
  auto r = run(dir, bbcluster + " --suite torchbench --data " + dir / "slow.txt" + " --log-dir " + logs
                      + " --config " + dir / "settings.toml");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  auto finished = bb::test::journal_lines(logs + "/results.jsonl", "job_finished");
  REQUIRE(finished.size() == 2);
  for (auto& j : finished) {
    CHECK(j["outcome"] == "ok");
    if (j["op_name"] != "aten.mm.default")
      continue;
    // The large input's reference ran too long: left out, from its correctness check or, on a
    // machine fast enough to check it within the timeout, from its timing. The small one was
    // evaluated.
    REQUIRE(j["correctness"].size() == 2);
    REQUIRE(j["performance"].size() == 2);
    auto& c = j["correctness"][0];
    auto& p = j["performance"][0];
    bool from_check = c["error_type"] == "reference_error"
                      && c["error_msg"].get<std::string>().find("ran past the call timeout") != std::string::npos;
    bool from_timing = p["error_msg"].get<std::string>().rfind("reference_error", 0) == 0
                       && p["error_msg"].get<std::string>().find("ran past the call timeout") != std::string::npos;
    CHECK((from_check || from_timing));
    CHECK(c["error_type"] != "timed_out");
    CHECK(j["correctness"][1]["is_correct"] == true);
  }
  CHECK(r.err.find("leaving that input out") != std::string::npos);
  CHECK(r.err.find("jobs failed as a whole") == std::string::npos);
}

TEST_CASE("every sweep is profiled, and a second sweep calibrates the cached reference timings",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "t.txt", "Operator: aten.relu.default\ncnt: 1, ((T([256, 256], f32),), {})\n"
                                      "Operator: aten.add.Tensor\ncnt: 1, ((T([64, 64], f32), T([64, 64], f32)), {})\n");
  // One intra-op thread: with two, a few calls of microseconds that wait for the second thread
  // can make aten's speedup against itself pass the outlier threshold, whose measurement again
  // is not cached.
  bb::test::write_file(dir / "settings.toml", "[evaluator]\ncpu_threads = 1\n[timing]\ncpu_warmup = 1\ncpu_runs = 10\n"
                                                "reference_cache_dir = \"" + dir / "refs" + "\"\n");
  auto sweep = [&](const std::string& name, const std::string& extra) {
    auto r = run(dir, bbcluster + " --suite torchbench --data " + dir / "t.txt" + " --log-dir " + dir / name
                        + " --config " + dir / "settings.toml " + extra);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return r;
  };
  auto first = sweep("first", "");
  // The profile: a table at the end, profile.json, and each job's phases in its journal line.
  CHECK(first.err.find("profile: seconds per evaluator slot and phase") != std::string::npos);
  CHECK(first.err.find("largest phases:") != std::string::npos);
  auto profile = json::parse(bb::test::read_file(dir / "first/profile.json"));
  CHECK(profile["jobs"] == 2);
  CHECK(profile["timer_seconds"].get<double>() > 0.0);
  CHECK(profile["slots"].contains("local/0"));
  for (auto& j : bb::test::journal_lines(dir / "first/results.jsonl", "job_finished")) {
    CHECK(j["phases"]["time_kernel"].get<double>() > 0.0);
    CHECK(j["phases"].contains("runner_start"));
    CHECK(j["phases"].contains("waiting"));
    CHECK(j["performance"][0]["reference_cached"] == false);
    CHECK(j["performance"][0]["timing_rounds"].get<int>() >= 2);
    CHECK(j["performance"][0]["speedup_ci_low"].get<double>() > 0.0);
  }
  std::map<std::string, double> cached; // what the first sweep kept: its reference times
  for (auto& j : bb::test::journal_lines(dir / "first/results.jsonl", "job_finished"))
    cached[j["op_name"]] = j["performance"][0]["reference_time_ms"].get<double>();
  sweep("second", "");
  // The cache had each figure: the reference was calibrated in this run, its own time counts,
  // and the drift is told against the cached one.
  for (auto& j : bb::test::journal_lines(dir / "second/results.jsonl", "job_finished")) {
    auto& p = j["performance"][0];
    CHECK(p["reference_cached"] == true);
    auto now = p["reference_time_ms"].get<double>();
    REQUIRE(cached.count(j["op_name"]) == 1);
    CHECK(p["reference_drift"].get<double>() == Approx(now / cached[j["op_name"]] - 1.0));
  }
  // --no-reference-cache times aten afresh.
  sweep("third", "--no-reference-cache");
  for (auto& j : bb::test::journal_lines(dir / "third/results.jsonl", "job_finished"))
    CHECK(j["performance"][0]["reference_cached"] == false);
  auto full = json::parse(bb::test::read_file(dir / "second/full_results.json"));
  bool seen = false;
  for (auto& row : full)
    if (row.contains("speedup")) {
      seen = true;
      CHECK(row.contains("speedup_ci_low"));
      CHECK(row.contains("reference_cached"));
      CHECK(row.contains("reference_drift"));
      CHECK_FALSE(row.contains("reference_round_means_ms"));
    }
  CHECK(seen);
}
