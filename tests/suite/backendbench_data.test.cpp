// BackendBench's data as it is: its .parquet through the converter and the content-keyed
// cache, its row filtering (included_in_benchmark, why_excluded, is_overhead_dominated_op),
// and .jsonl written by Python's json module (NaN).

#include <catch2/catch.hpp>

#include "skip.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "artefacts/parquet_cache.hpp"
#include "cluster/config.hpp"
#include "suite/plan.hpp"
#include "suite/traces.hpp"
#include "support.hpp"

using namespace bb;

namespace {

const std::string converter = BB_SOURCE_DIR "/python/bbcluster_parquet.py";
// The shared data beside the clone (CI: ../shared next to the checkout).
const std::string shared_parquet =
  BB_SOURCE_DIR "/../shared/data/traces/backendbench/backend_bench_problems.parquet";

bool python_has_pyarrow() {
  auto line = build_python() + " -c 'import pyarrow' >/dev/null 2>&1";
  return std::system(line.c_str()) == 0;
}

std::map<std::string, size_t> input_counts(const suite& s) {
  std::map<std::string, size_t> out;
  for (auto& op : s.ops)
    out[op.op_name] = op.correctness.size();
  return out;
}

traces::load_report load_jsonl(const std::string& text, traces::row_filter filter = {}) {
  traces::trace_loader loader(filter);
  loader.add_jsonl_text(text, "rows.jsonl");
  return loader.finish();
}

} // namespace

TEST_CASE("NaN and Infinity outside strings become null, and inside strings they stay", "[suite]") {
  CHECK(traces::nonfinite_to_null(R"({"a": NaN, "b": -Infinity, "c": Infinity})")
        == R"({"a": null, "b": null, "c": null})");
  CHECK(traces::nonfinite_to_null(R"({"s": "NaN \" Infinity", "t": [1, NaN]})")
        == R"({"s": "NaN \" Infinity", "t": [1, null]})");
  // Not a literal: part of a longer word is left alone (a parse error stays one).
  CHECK(traces::nonfinite_to_null(R"({"a": xNaN})") == R"({"a": xNaN})");
}

TEST_CASE("a .jsonl written by Python's json module, with NaN, loads", "[suite]") {
  auto r = load_jsonl(
    R"j({"op_name": "aten.relu.default", "args": "((T([2], f32),), {})", "runtime_ms": NaN, "included_in_benchmark": true})j"
    "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([4], f32),), {})", "runtime_ms": Infinity, "relative_runtime_to_kernel_launch": -Infinity})j"
    "\n");
  INFO((r.errors.empty() ? std::string() : r.errors.front()));
  CHECK(r.errors.empty());
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].correctness.size() == 2);
}

TEST_CASE("excluded rows are counted per why_excluded reason and per operator", "[suite]") {
  auto rows =
    R"j({"op_name": "aten.relu.default", "args": "((T([2], f32),), {})", "included_in_benchmark": true, "why_excluded": []})j"
    "\n"
    R"j({"op_name": "aten.empty_like.default", "args": "((T([2], f32),), {})", "included_in_benchmark": false, "why_excluded": ["creation op", "synthetic"]})j"
    "\n"
    R"j({"op_name": "aten.empty_like.default", "args": "((T([3], f32),), {})", "included_in_benchmark": false, "why_excluded": ["creation op"]})j"
    "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([5], f32),), {})", "included_in_benchmark": false})j"
    "\n"
    // No included_in_benchmark column: a synthetic row is left out as BackendBench's filter does.
    R"j({"op_name": "aten.tanh.default", "args": "((T([2], f32),), {})", "is_synthetic": true})j"
    "\n";
  auto r = load_jsonl(rows);
  CHECK(r.excluded_rows == 4);
  CHECK(r.excluded_reasons["creation op"] == 2);
  CHECK(r.excluded_reasons["synthetic"] == 1);
  CHECK(r.excluded_reasons["(no reason given)"] == 1);
  CHECK(r.excluded_reasons["Synthetic ops are not supported in the official benchmark yet"] == 1);
  CHECK(r.excluded_by_op["aten.empty_like.default"] == 2);
  CHECK(r.excluded_by_op["aten.relu.default"] == 1);
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].op_name == "aten.relu.default");

  bb::test::temp_dir dir;
  bb::test::write_file(dir / "rows.jsonl", rows);
  plan_request req;
  req.suite_name = "torchbench";
  req.data = dir / "rows.jsonl";
  auto plan = make_plan(req);
  REQUIRE(plan.fatal.empty());
  auto listed = format_exclusions(plan);
  INFO(listed);
  CHECK(listed.find("4 rows left out: not included_in_benchmark") != std::string::npos);
  CHECK(listed.find("creation op") != std::string::npos);
  // relu has an included row; empty_like and tanh have none.
  CHECK(listed.find("2 operators of the data have no included row") != std::string::npos);
  CHECK(listed.find("aten.empty_like.default (2 rows)") != std::string::npos);
  CHECK(listed.find("aten.relu.default (") == std::string::npos);
}

TEST_CASE("the flag --check-overhead-dominated-ops keeps only marked rows, then included ones", "[suite]") {
  auto rows =
    R"j({"op_name": "aten.relu.default", "args": "((T([2], f32),), {})", "included_in_benchmark": true, "is_overhead_dominated_op": true})j"
    "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([3], f32),), {})", "included_in_benchmark": true, "is_overhead_dominated_op": false})j"
    "\n"
    R"j({"op_name": "aten.tanh.default", "args": "((T([2], f32),), {})", "included_in_benchmark": false, "why_excluded": ["x"], "is_overhead_dominated_op": true})j"
    "\n"
    R"j({"op_name": "aten.neg.default", "args": "((T([2], f32),), {})", "included_in_benchmark": true})j"
    "\n";
  auto all = load_jsonl(rows);
  CHECK(all.loaded.ops.size() == 2);
  auto r = load_jsonl(rows, traces::row_filter{true});
  CHECK(r.not_overhead_rows == 2);
  CHECK(r.excluded_rows == 1);
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].op_name == "aten.relu.default");
  CHECK(r.loaded.ops[0].correctness == std::vector<std::string>{"((T([2], f32),), {})"});

  // Trace files carry no mark: the selection is empty, and the plan says why.
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "t.txt", "Operator: aten.relu.default\ncnt: 1, ((T([2], f32),), {})\n");
  plan_request req;
  req.suite_name = "torchbench";
  req.data = dir / "t.txt";
  req.overhead_dominated_only = true;
  auto plan = make_plan(req);
  CHECK(plan.fatal.find("marks none") != std::string::npos);
}

TEST_CASE("a parquet the test writes converts once per content and loads as BackendBench reads it",
          "[suite]") {
  if (!python_has_pyarrow()) {
    BB_SKIP("no pyarrow in " + build_python() + ": parquet test skipped (scripts/setup.sh installs it)");
  }
  bb::test::temp_dir dir;
  auto script = R"py(
import math, sys
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({
  "op_name": ["aten.relu.default", "aten.relu.default", "aten.add.Tensor", "aten.empty.memory_format"],
  "args": ["((T([2, 3], f32),), {})", "((T([8], f16),), {})",
           "((T([4], f32), T([4], f32)), {})", "(([2],), {})"],
  "included_in_benchmark": [True, True, True, False],
  "why_excluded": [[], [], [], ["creation op"]],
  "runtime_ms": [0.5, math.nan, 1.0, math.nan],
  "is_overhead_dominated_op": [False, True, False, False],
}), sys.argv[1])
)py";
  bb::test::write_file(dir / "make.py", script);
  REQUIRE(std::system((build_python() + " " + dir / "make.py" + " " + dir / "small.parquet").c_str()) == 0);
  auto cache = dir / "cache";
  auto first = cached_parquet_jsonl(dir / "small.parquet", cache, build_python(), converter);
  INFO(first.error);
  REQUIRE(first.error.empty());
  CHECK(first.converted);
  auto second = cached_parquet_jsonl(dir / "small.parquet", cache, build_python(), converter);
  CHECK(second.jsonl == first.jsonl);
  CHECK_FALSE(second.converted);
  // The key is the content: a copy under another name hits the same entry.
  std::filesystem::copy_file(dir / "small.parquet", dir / "copy.parquet");
  auto copy = cached_parquet_jsonl(dir / "copy.parquet", cache, build_python(), converter);
  CHECK(copy.jsonl == first.jsonl);
  CHECK_FALSE(copy.converted);

  plan_request req;
  req.suite_name = "torchbench";
  req.data = first.jsonl;
  auto plan = make_plan(req);
  INFO((plan.input_errors.empty() ? plan.fatal : plan.input_errors.front()));
  REQUIRE(plan.fatal.empty());
  CHECK(plan.input_errors.empty());
  CHECK(input_counts(plan.work) == std::map<std::string, size_t>{{"aten.add.Tensor", 1}, {"aten.relu.default", 2}});
  CHECK(plan.excluded_reasons["creation op"] == 1);
  req.overhead_dominated_only = true;
  auto overhead = make_plan(req);
  CHECK(input_counts(overhead.work) == std::map<std::string, size_t>{{"aten.relu.default", 1}});

  bb::test::write_file(dir / "not.parquet", "this is not parquet");
  auto bad = cached_parquet_jsonl(dir / "not.parquet", cache, build_python(), converter);
  CHECK(bad.jsonl.empty());
  CHECK(bad.error.find("not.parquet") != std::string::npos);
  CHECK(bad.error.find("not a readable parquet file") != std::string::npos);
}

TEST_CASE("BackendBench's shared parquet loads with the operators and inputs of the included set",
          "[suite]") {
  if (!std::filesystem::exists(shared_parquet)) {
    BB_SKIP("no " + shared_parquet + " beside the clone: shared parquet test skipped");
  }
  if (!python_has_pyarrow()) {
    BB_SKIP("no pyarrow in " + build_python() + ": parquet test skipped (scripts/setup.sh installs it)");
  }
  bb::test::temp_dir dir;
  auto got = cached_parquet_jsonl(shared_parquet, dir / "cache", build_python(), converter);
  INFO(got.error);
  REQUIRE(got.error.empty());
  auto from_parquet = traces::load(got.jsonl);
  auto from_text = traces::load(BB_TRACES_DIR "/backendbench/backend_bench_problems_included.txt");
  REQUIRE(from_parquet.fatal.empty());
  CHECK(from_parquet.errors.empty());
  CHECK(from_parquet.loaded.ops.size() == 136);
  CHECK(input_counts(from_parquet.loaded) == input_counts(from_text.loaded));
  CHECK(from_parquet.excluded_rows == 19171 - 15568);
  CHECK(from_parquet.excluded_reasons["Synthetic ops are not supported in the official benchmark yet"] > 0);

  // The overhead-dominated selection: the distinct (op, args) of the rows marked both
  // is_overhead_dominated_op and included_in_benchmark, counted here from the rows directly.
  std::set<std::pair<std::string, std::string>> expected;
  std::istringstream rows(bb::test::read_file(got.jsonl));
  for (std::string line; std::getline(rows, line);) {
    auto row = nlohmann::json::parse(traces::nonfinite_to_null(line));
    std::string why;
    auto op = row["op_name"].get<std::string>();
    if (row["is_overhead_dominated_op"] == true && row["included_in_benchmark"] == true
        && !traces::is_skipped_by_backendbench(op, why))
      expected.insert({op, row["args"].get<std::string>()});
  }
  auto overhead = traces::load(got.jsonl, traces::row_filter{true});
  std::set<std::pair<std::string, std::string>> selected;
  for (auto& op : overhead.loaded.ops)
    for (auto& args : op.correctness)
      selected.insert({op.op_name, args});
  CHECK(expected.size() > 100);
  CHECK(selected == expected);
  CHECK(overhead.not_overhead_rows > 15000);
}
