#include <catch2/catch.hpp>

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
  CHECK(r.out.find("3 of 6 operators skipped") != std::string::npos);
  CHECK(r.out.find("aten.mm.default: reference_error") != std::string::npos);
  CHECK(r.out.find("aten.no_such_op.default: unsupported op") != std::string::npos);
  CHECK(r.out.find("aten._sparse_coo_tensor_with_dims_and_tensors.default: unsupported") != std::string::npos);
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
  CHECK(r.out.find("index_select") == std::string::npos);
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
