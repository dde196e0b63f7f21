#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "suite/args.hpp"
#include "suite/plan.hpp"
#include "suite/traces.hpp"
#include "support.hpp"

using namespace bb;

namespace {

const std::string traces_dir = BB_TRACES_DIR;

size_t count_cnt_lines(const std::string& root) {
  size_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".txt")
      continue;
    std::istringstream in(bb::test::read_file(e.path().string()));
    for (std::string line; std::getline(in, line);)
      n += line.rfind("cnt:", 0) == 0;
  }
  return n;
}

traces::load_report load_text(const std::string& text) {
  traces::trace_loader loader;
  loader.add_trace_text(text, "t.txt");
  return loader.finish();
}

} // namespace

TEST_CASE("every line of every shared trace file parses", "[suite]") {
  REQUIRE(std::filesystem::exists(traces_dir));
  auto expected = count_cnt_lines(traces_dir);
  auto report = traces::load(traces_dir);
  INFO((report.errors.empty() ? std::string() : report.errors.front()));
  CHECK(report.fatal.empty());
  CHECK(report.errors.empty());
  CHECK(expected > 20000);
  CHECK(report.lines == expected);
}

TEST_CASE("the included BackendBench set: 15,568 lines, 136 operators, dedup by (op, args)",
          "[suite]") {
  auto report = traces::load(traces_dir + "/backendbench/backend_bench_problems_included.txt");
  REQUIRE(report.errors.empty());
  CHECK(report.lines == 15568);
  size_t inputs = 0;
  for (auto& op : report.loaded.ops)
    inputs += op.correctness.size();
  // The included rows are distinct (op, args) pairs, already without the ops BackendBench skips.
  CHECK(report.skipped.empty());
  CHECK(report.loaded.ops.size() == 136);
  CHECK(inputs == 15568);
}

TEST_CASE("duplicate lines are one input, and sum.SymInt reads as sum.dim_IntList", "[suite]") {
  auto r = load_text("Operator: aten.relu.default\n"
                     "cnt: 3, ((T([2], f16),), {})\n"
                     "cnt: 1, ((T([2], f16),), {})\n"
                     "Operator: aten.sum.SymInt\n"
                     "cnt: 1, ((T([2, 3], f16), [1]), {})\n");
  REQUIRE(r.errors.empty());
  CHECK(r.lines == 3);
  REQUIRE(r.loaded.ops.size() == 2);
  CHECK(r.loaded.ops[0].correctness.size() == 1);
  CHECK(r.loaded.ops[1].op_name == "aten.sum.dim_IntList");
}

TEST_CASE("a bad line names file, line and column, and the rest still loads", "[suite]") {
  auto r = load_text("Operator: aten.add.Tensor\n"
                     "cnt: 1, ((T([2], f16), T([2], f16)), {})\n"
                     "cnt: 1, ((T([2], q16), T([2], f16)), {})\n"
                     "cnt: 2, ((T([3], f16), 1.5), {})\n"
                     "garbage here\n");
  REQUIRE(r.errors.size() == 2);
  CHECK(r.errors[0] == "t.txt:3:18: expected a dtype (bf16 f16 f32 f64 c32 c64 c128 i8 i16 i32 "
                       "i64 b8 u8), found 'q16), T([2],'");
  CHECK(r.errors[1].rfind("t.txt:5:1: expected 'Operator: NAME' or 'cnt: N, (ARGS, KWARGS)'", 0) == 0);
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].correctness.size() == 2);
}

TEST_CASE("a .jsonl leaves out rows not included in the benchmark and reports bad rows",
          "[suite]") {
  traces::trace_loader loader;
  loader.add_jsonl_text(
    R"j({"op_name": "aten.relu.default", "args": "((T([4], f32),), {})", "included_in_benchmark": true})j" "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([8], f32),), {})", "included_in_benchmark": false})j" "\n"
    R"j({"op_name": "aten.relu.default"})j" "\n"
    R"j(not json)j" "\n",
    "p.jsonl");
  auto r = loader.finish();
  CHECK(r.excluded_rows == 1);
  REQUIRE(r.errors.size() == 2);
  CHECK(r.errors[0].rfind("p.jsonl:3:", 0) == 0);
  CHECK(r.errors[1].rfind("p.jsonl:4:", 0) == 0);
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].correctness == std::vector<std::string>{"((T([4], f32),), {})"});
}

TEST_CASE("BackendBench's skip list drops operators by substring and says why", "[suite]") {
  auto r = load_text("Operator: aten.index_select.default\n"
                     "cnt: 1, ((T([4], f32), 0, T([2], i64)), {})\n"
                     "Operator: aten.scatter_add.default\n"
                     "cnt: 1, ((T([4], f32), 0, T([2], i64), T([2], f32)), {})\n"
                     "Operator: aten.relu.default\n"
                     "cnt: 1, ((T([4], f32),), {})\n");
  REQUIRE(r.skipped.size() == 2);
  CHECK(r.skipped[0].find("aten.index_select.default: skipped") == 0);
  CHECK(r.skipped[0].find("'index'") != std::string::npos);
  REQUIRE(r.loaded.ops.size() == 1);
  CHECK(r.loaded.ops[0].op_name == "aten.relu.default");
}

TEST_CASE("topn keeps the largest inputs by tensor bytes, nested lists counted", "[suite]") {
  suite s;
  s.ops.push_back({"aten.cat.default",
                   {"(([T([2], f32), T([2], f32)],), {})",   // 16 bytes in a list
                    "((T([3], f64),), {})",                 // 24 bytes
                    "((T([2], f16),), {})",                 // 4 bytes
                    "((T([4], f32, [2]),), {})"},           // 16 bytes, strided: logical numel
                   {}});
  traces::keep_largest(s, 3);
  auto& kept = s.ops[0].correctness;
  REQUIRE(kept.size() == 3);
  CHECK(kept[0] == "((T([3], f64),), {})");
  // Ties by the argument text, descending, as BackendBench's sorted(reverse=True): '[' > 'T'.
  CHECK(kept[1] == "(([T([2], f32), T([2], f32)],), {})");
  CHECK(kept[2] == "((T([4], f32, [2]),), {})");
  CHECK(s.ops[0].performance == kept);
}

TEST_CASE("ops filter on real traces: relu.default is exact, relu is every overload", "[suite]") {
  plan_request req;
  req.suite_name = "torchbench";
  req.data = traces_dir + "/torchbench_train";
  req.ops = {"relu.default"};
  auto exact = make_plan(req);
  REQUIRE(exact.fatal.empty());
  REQUIRE(exact.work.ops.size() == 1);
  CHECK(exact.work.ops[0].op_name == "aten.relu.default");
  req.ops = {"relu"};
  auto base = make_plan(req);
  std::vector<std::string> names;
  for (auto& op : base.work.ops)
    names.push_back(op.op_name);
  CHECK(std::find(names.begin(), names.end(), "aten.relu.default") != names.end());
  CHECK(std::find(names.begin(), names.end(), "aten.relu_.default") == names.end());
  for (auto& n : names)
    CHECK(n.find("leaky_relu") == std::string::npos);
  // The full traces have leaky_relu too: it is there, just not selected.
  req.ops = {"leaky_relu"};
  CHECK_FALSE(make_plan(req).work.ops.empty());
  req.ops = {"rellu"};
  auto none = make_plan(req);
  REQUIRE(none.warnings.size() == 1);
  INFO(none.warnings[0]);
  CHECK(none.warnings[0].find("closest: aten.relu") != std::string::npos);
}

TEST_CASE("torchbench without --data says how to get the data", "[suite]") {
  plan_request req;
  req.suite_name = "torchbench";
  auto plan = make_plan(req);
  CHECK(plan.fatal.find("GPUMODE/backendbench_tests") != std::string::npos);
  CHECK(plan.fatal.find("backend_bench_problems.parquet") != std::string::npos);
  CHECK(plan.fatal.find(".jsonl") != std::string::npos);
  req.data = "/no/such/path";
  CHECK(make_plan(req).fatal == "--data /no/such/path: no such file or folder");
}

TEST_CASE("args are written back as BackendBench's serialize_args writes them", "[suite]") {
  auto ser = [](const std::string& text) { return args::serialize_text(text); };
  CHECK(ser("((1, 2.5, 'hello', True, None), {})") == "((1, 2.5, 'hello', True, None,), {})");
  CHECK(ser("(([T([5, 5], f32), T([3, 3], i64), 42],), {})")
        == "(([T([5, 5], f32), T([3, 3], i64), 42],), {})");
  CHECK(ser("((), {'weight': T([3, 3], f32), 'bias': None, 'alpha': 0.5})")
        == "((), {'weight': T([3, 3], f32), 'bias': None, 'alpha': 0.5})");
  CHECK(ser("((T([128, 256], f16), [1024, 249, 249]), {'dtype': f16, 'layout': torch.strided, "
            "'device': 'cuda'})")
        == "((T([128, 256], f16), [1024, 249, 249],), {'dtype': torch.float16, 'layout': "
           "torch.strided, 'device': 'cuda'})");
  // Strides only when not contiguous, always as a list.
  CHECK(ser("((T([2, 3], f32, stride=(3, 1)),), {})") == "((T([2, 3], f32),), {})");
  CHECK(ser("((T([2, 3], f32, stride=(1, 2)),), {})") == "((T([2, 3], f32, [1, 2]),), {})");
  CHECK(ser("((T([1, 3], f32, (7, 1)),), {})") == "((T([1, 3], f32),), {})");
  CHECK(ser("((T([], f32), -inf, 1e-05, 9223372036854775807), {'device': \"torch.device('cpu')\"})")
        == "((T([], f32), -inf, 1e-05, 9223372036854775807,), {'device': device(type='cpu')})");
  CHECK(ser("((), {})") == "((), {})");
}

TEST_CASE("floats as Python's repr", "[suite]") {
  CHECK(args::python_repr(1.0) == "1.0");
  CHECK(args::python_repr(0.1) == "0.1");
  CHECK(args::python_repr(1e-05) == "1e-05");
  CHECK(args::python_repr(0.0001) == "0.0001");
  CHECK(args::python_repr(1e16) == "1e+16");
  CHECK(args::python_repr(1e15) == "1000000000000000.0");
  CHECK(args::python_repr(-2.5e-7) == "-2.5e-07");
  CHECK(args::python_repr(123.456) == "123.456");
  CHECK(args::python_repr(1.7320507764816284) == "1.7320507764816284");
}

TEST_CASE("included_in_benchmark takes true or false only, naming file, line and key", "[suite]") {
  traces::trace_loader loader;
  loader.add_jsonl_text(
    R"j({"op_name": "aten.relu.default", "args": "((T([4], f32),), {})", "included_in_benchmark": true})j" "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([8], f32),), {})", "included_in_benchmark": "no"})j" "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([9], f32),), {})", "included_in_benchmark": 0})j" "\n"
    R"j({"op_name": "aten.relu.default", "args": "((T([7], f32),), {})", "included_in_benchmark": null})j" "\n"
    R"j({"op_name": "aten.tanh.default", "args": "((T([4], f32),), {})", "included_in_benchmark": false})j" "\n"
    R"j({"op_name": "aten.neg.default", "args": "((T([4], f32),), {})"})j" "\n",
    "p.jsonl");
  auto r = loader.finish();
  REQUIRE(r.errors.size() == 3);
  CHECK(r.errors[0] == "p.jsonl:2:66: \"included_in_benchmark\" must be true or false, as in "
                       "BackendBench's data, not \"no\"");
  CHECK(r.errors[1] == "p.jsonl:3:66: \"included_in_benchmark\" must be true or false, as in "
                       "BackendBench's data, not 0");
  CHECK(r.errors[2] == "p.jsonl:4:66: \"included_in_benchmark\" must be true or false, as in "
                       "BackendBench's data, not null");
  // Neither taken nor counted as left out by the data: the row is refused.
  CHECK(r.excluded_rows == 1);
  REQUIRE(r.loaded.ops.size() == 2);
  CHECK(r.loaded.ops[0].correctness == std::vector<std::string>{"((T([4], f32),), {})"});
  CHECK(r.loaded.ops[1].op_name == "aten.neg.default"); // no such column: as before
}

TEST_CASE("bytes that are not text are escaped in what a bad line quotes", "[suite]") {
  CHECK(traces::printable("plain text, 'quoted'") == "plain text, 'quoted'");
  CHECK(traces::printable("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93"); // UTF-8 stays
  CHECK(traces::printable(std::string("\x1b[2J\x00\x7f\t", 7)) == "\\x1b[2J\\x00\\x7f\\x09");
  CHECK(traces::printable("\xff\xfe\xc3") == "\\xff\\xfe\\xc3"); // not UTF-8
  CHECK(traces::printable("\xc2\x9b" "31m") == "\\xc2\\x9b31m"); // U+009B, a terminal's CSI
  auto r = load_text("\x7f" "ELF\x02\x01\x01\x1b[31m\n");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == "t.txt:1:1: expected 'Operator: NAME' or 'cnt: N, (ARGS, KWARGS)', found "
                       "'\\x7fELF\\x02\\x01\\x01\\x1b[31m'");
}

TEST_CASE("data that selects no operator is an error that says why", "[suite]") {
  bb::test::temp_dir dir;
  plan_request req;
  req.suite_name = "torchbench";
  auto fatal_of = [&](const std::string& data) {
    req.data = data;
    auto plan = make_plan(req);
    CHECK(plan.work.ops.empty());
    return plan.fatal;
  };
  bb::test::write_file(dir / "empty.txt", "");
  CHECK(fatal_of(dir / "empty.txt") == "--data " + dir / "empty.txt"
                                         + " selects no operator: it holds no input ('cnt:' line "
                                           "or .jsonl row)");
  bb::test::write_file(dir / "comments.txt", "# nothing here\n\n");
  CHECK(fatal_of(dir / "comments.txt").find("it holds no input") != std::string::npos);
  std::filesystem::create_directories(dir / "many");
  for (int i = 0; i < 10000; ++i)
    bb::test::write_file(dir / ("many/t" + std::to_string(i) + ".txt"), "");
  auto start = std::chrono::steady_clock::now();
  CHECK(fatal_of(dir / "many") == "--data " + dir / "many"
                                    + " selects no operator: its 10000 trace files hold no input "
                                      "('cnt:' line or .jsonl row)");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  std::string junk;
  for (int i = 0; i < 4000; ++i)
    junk += static_cast<char>((i * 7919) % 256);
  bb::test::write_file(dir / "junk.txt", junk);
  req.data = dir / "junk.txt";
  auto plan = make_plan(req);
  CHECK(plan.fatal.rfind("--data " + dir / "junk.txt" + " selects no operator: none of its lines "
                         "parse (", 0) == 0);
  REQUIRE_FALSE(plan.input_errors.empty());
  size_t control = 0;
  for (auto& e : plan.input_errors)
    control += static_cast<size_t>(std::count_if(e.begin(), e.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20;
    }));
  CHECK(control == 0);
  bb::test::write_file(dir / "excluded.jsonl",
    R"j({"op_name": "aten.relu.default", "args": "((T([4], f32),), {})", "included_in_benchmark": false})j" "\n");
  CHECK(fatal_of(dir / "excluded.jsonl") == "--data " + dir / "excluded.jsonl"
                                              + " selects no operator: 1 rows not "
                                                "included_in_benchmark");
  bb::test::write_file(dir / "skipped.txt", "Operator: aten.index_select.default\n"
                                            "cnt: 1, ((T([4], f32), 0, T([2], i64)), {})\n");
  CHECK(fatal_of(dir / "skipped.txt").find("1 operators BackendBench's torchbench suite skips")
        != std::string::npos);
}

TEST_CASE("an --ops filter that matches nothing is an error naming the suite", "[suite]") {
  plan_request req;
  req.ops = {"nosuchop"};
  auto plan = make_plan(req);
  CHECK(plan.work.ops.empty());
  CHECK(plan.fatal == "--ops nosuchop selects none of the 1 operators of suite smoke (--list "
                      "shows them)");
  REQUIRE(plan.warnings.size() == 1); // with the closest names, printed before the error
  req.ops = {"relu"};
  CHECK(make_plan(req).fatal.empty());
}
