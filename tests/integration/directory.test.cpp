#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "programs.hpp"

using nlohmann::json;
using bb::test::run;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";


// Small inputs for the operators of examples/kernels.
const char* trace =
  "Operator: aten.relu.default\n"
  "cnt: 1, ((T([64, 32], f32),), {})\n"
  "cnt: 1, ((T([16, 8], f16, stride=(1, 16)),), {})\n"
  "Operator: aten.add.Tensor\n"
  "cnt: 1, ((T([8, 8], f32), T([8], f32)), {})\n"
  "cnt: 1, ((T([4, 4], f16), T([4, 4], f16)), {'alpha': 2})\n"
  "Operator: aten.mul.Tensor\n"
  "cnt: 1, ((T([8], f32), T([8], f32)), {})\n"
  "Operator: aten.sub.Tensor\n"
  "cnt: 1, ((T([8], f32), T([8], f32)), {})\n"
  "Operator: aten.neg.default\n"
  "cnt: 1, ((T([8], f32),), {})\n"
  "Operator: aten.sin.default\n"
  "cnt: 1, ((T([32], f32),), {})\n"
  "Operator: aten.tanh.default\n"
  "cnt: 1, ((T([8], f32),), {})\n"
  "Operator: aten.cos.default\n"
  "cnt: 1, ((T([8], f32),), {})\n";

std::map<std::string, std::vector<json>> records_by_op(const std::string& path) {
  std::map<std::string, std::vector<json>> out;
  for (auto& row : json::parse(bb::test::read_file(path)))
    out[row["op_name"].get<std::string>()].push_back(row);
  return out;
}

} // namespace

TEST_CASE("a directory sweep of the examples: every kernel kind with its outcome, cached after",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "trace.txt", trace);
  bb::test::write_file(dir / "settings.toml", "[timing]\ncpu_warmup = 1\ncpu_runs = 3\n[compile]\ncache_dir = \""
                                                + dir / "cache" + "\"\n");
  auto command = bbcluster + " --suite torchbench --data " + dir / "trace.txt"
                 + " --backend directory --ops-directory " BB_SOURCE_DIR "/examples/kernels --config "
                 + dir / "settings.toml";
  auto r = run(dir, command + " --log-dir " + dir / "run1");
  INFO(r.err);
  REQUIRE(r.status == 0);
  // Scored: relu (cpp), add (py), sin (py) pass; sub (wrong) and neg (wrong signature) fail.
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.60\n") == 0);
  CHECK(r.out.find("aten.mul.Tensor: needs_cuda") != std::string::npos);
  CHECK(r.err.find("tanh__default_implementation_v1.py: no function named "
                   "tanh__default_kernel_impl (the entry point) (left out)") != std::string::npos);
  CHECK(r.err.find("6 of the 8 selected operators have one") != std::string::npos);

  auto rows = records_by_op(dir / "run1/full_results.json");
  for (auto op : {"relu.default", "add.Tensor", "sin.default"})
    for (auto& row : rows[op]) {
      INFO(op << ": " << row.dump());
      if (row["test_type"] == "correctness")
        CHECK(row["is_correct"] == true);
      else
        CHECK(row["successfully_ran"] == true);
    }
  REQUIRE_FALSE(rows["sub.Tensor"].empty());
  auto& sub = rows["sub.Tensor"][0];
  CHECK(sub["is_correct"] == false);
  CHECK(sub["error_type"] == "incorrect");
  CHECK(sub["max_abs_error"].get<double>() > 0.1);
  REQUIRE_FALSE(rows["neg.default"].empty());
  auto& neg = rows["neg.default"][0];
  CHECK(neg["error_type"] == "schema_mismatch");
  auto msg = neg["error_msg"].get<std::string>();
  CHECK(msg.find("aten::neg(Tensor self) -> Tensor") != std::string::npos);
  CHECK(msg.find("int") != std::string::npos);
  CHECK(rows.count("tanh.default") == 0);
  CHECK(r.err.find("compile_pool: " BB_SOURCE_DIR "/examples/kernels/relu__default/"
                   "relu__default_implementation_v1.cpp ok") != std::string::npos);

  // The same directory again: every native kernel comes from the cache.
  auto again = run(dir, command + " --disable-output-logs");
  INFO(again.err);
  REQUIRE(again.status == 0);
  CHECK(again.out.substr(0, again.out.find('\n')) == r.out.substr(0, r.out.find('\n')));
  auto count = [&](const std::string& text) {
    size_t n = 0;
    for (auto pos = again.err.find(text); pos != std::string::npos; pos = again.err.find(text, pos + 1))
      ++n;
    return n;
  };
  // relu, sub and neg are built; mul (.cu) is needs_cuda here and never compiled.
  CHECK(count("compile_pool: ") == 4);
  CHECK(count(" ok (cached, ") == 3);
}

TEST_CASE("a Python kernel that fails to import gives its traceback in failed_tests.json",
          "[integration]") {
  bb::test::temp_dir dir;
  std::filesystem::create_directories(dir / "kernels/relu__default");
  bb::test::write_file(dir / "kernels/relu__default/relu__default_implementation_v1.py",
                       "import torch\n\nraise RuntimeError('broken at import')\n\n"
                       "def relu__default_kernel_impl(x):\n    return x.relu()\n");
  auto r = run(dir, bbcluster + " --backend directory --ops-directory " + dir / "kernels"
                      + " --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.00\n") == 0);
  auto failed = json::parse(bb::test::read_file(dir / "run/failed_tests.json"));
  REQUIRE(failed.size() == 2);
  auto& correctness = failed[0]["test_type"] == "correctness" ? failed[0] : failed[1];
  CHECK(correctness["error_type"] == "RuntimeError");
  auto tb = correctness["traceback"].get<std::string>();
  CHECK(tb.find("relu__default_implementation_v1.py\", line 3") != std::string::npos);
  CHECK(tb.find("broken at import") != std::string::npos);
}
