#include <catch2/catch.hpp>

#include "generate/generation.hpp"

using namespace bb;

namespace {

eval_result evaluated(const std::string& outcome, std::vector<bool> correct,
                      std::vector<double> speedups) {
  eval_result r;
  r.op_name = "aten.tanh.default";
  REQUIRE(from_string(outcome, r.outcome));
  for (size_t i = 0; i < correct.size(); ++i) {
    correctness_record c;
    c.op_name = r.op_name;
    c.args = "((T([" + std::to_string(i + 2) + "], f32),), {})";
    c.is_correct = correct[i];
    if (!correct[i]) {
      c.error_type = "AssertionError";
      c.error_msg = "Tensor-likes are not close!";
      c.max_abs_error = 0.25;
      c.max_rel_error = 0.5;
    }
    r.correctness.push_back(c);
  }
  for (auto s : speedups) {
    performance_record p;
    p.op_name = r.op_name;
    p.args = "((T([1024, 1024], f32),), {})";
    p.successfully_ran = true;
    p.speedup = s;
    p.reference_time_ms = 1.0;
    p.benchmark_time_ms = 1.0 / s;
    r.performance.push_back(p);
  }
  return r;
}

} // namespace

TEST_CASE("an operator's brief names its folder, schema and largest inputs", "[generate]") {
  auto b = make_op_brief("aten.add.Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                         {"a", "b", "c", "d", "e", "f", "g"}, 3);
  CHECK(b.folder == "add__Tensor");
  CHECK(b.examples == std::vector<std::string>{"a", "b", "c"});
  CHECK(kernel_folder("aten.relu.default") == "relu__default");
}

TEST_CASE("the prompt carries schema, inputs, entry point, ABI and feedback", "[generate]") {
  auto b = make_op_brief("aten.relu.default", "aten::relu(Tensor self) -> Tensor",
                         {"((T([64, 128], f16),), {})"});
  auto triton = kernel_prompt(b, kernel_dsl::triton, "");
  CHECK_THAT(triton, Catch::Contains("Operator: aten.relu.default"));
  CHECK_THAT(triton, Catch::Contains("aten::relu(Tensor self) -> Tensor"));
  CHECK_THAT(triton, Catch::Contains("((T([64, 128], f16),), {})"));
  CHECK_THAT(triton, Catch::Contains("`relu__default_kernel_impl`"));
  CHECK_THAT(triton, Catch::Contains("@triton.jit"));
  CHECK_THAT(triton, Catch::Contains("```python"));
  CHECK_THAT(triton, !Catch::Contains("previous version"));
  auto cuda = kernel_prompt(b, kernel_dsl::cuda, "It did not build.");
  CHECK_THAT(cuda, Catch::Contains("BBCLUSTER_EXPORT_KERNEL(`relu__default_kernel_impl`)"));
  CHECK_THAT(cuda, Catch::Contains("```cuda"));
  CHECK_THAT(cuda, Catch::Contains("Your previous version was evaluated"));
  CHECK_THAT(cuda, Catch::Contains("It did not build."));
  CHECK(kind_of(kernel_dsl::cuda) == kernel_kind::cu);
  CHECK(kind_of(kernel_dsl::pytorch) == kernel_kind::py);
  kernel_dsl d;
  CHECK(from_string("pytorch", d));
  CHECK(d == kernel_dsl::pytorch);
  CHECK_FALSE(from_string("opencl", d));
}

TEST_CASE("feedback says what went wrong with the previous version", "[generate]") {
  SECTION("incorrect inputs with their errors and max errors, and timings") {
    auto r = evaluated("ok", {true, false}, {0.8});
    auto f = describe_for_feedback(r, "def tanh__default_kernel_impl(x): return x", 1.0);
    CHECK_THAT(f, Catch::Contains("def tanh__default_kernel_impl(x): return x"));
    CHECK_THAT(f, Catch::Contains("Incorrect on input ((T([3], f32),), {})"));
    CHECK_THAT(f, !Catch::Contains("Incorrect on input ((T([2], f32),), {})"));
    CHECK_THAT(f, Catch::Contains("AssertionError: Tensor-likes are not close!"));
    CHECK_THAT(f, Catch::Contains("max absolute error 0.25, max relative error 0.5"));
    CHECK_THAT(f, Catch::Contains("speedup 0.80x"));
    CHECK_THAT(f, Catch::Contains("Make it correct on every input"));
  }
  SECTION("a build error") {
    auto r = evaluated("compile_failed", {}, {});
    r.detail = "kernel.cu:3: error: expected ';'";
    auto f = describe_for_feedback(r, "", 1.0);
    CHECK_THAT(f, Catch::Contains("did not build"));
    CHECK_THAT(f, Catch::Contains("kernel.cu:3: error: expected ';'"));
  }
  SECTION("a crash") {
    auto r = evaluated("crashed", {}, {});
    r.detail = "killed by signal 11 (SIGSEGV)";
    CHECK_THAT(describe_for_feedback(r, "", 1.0), Catch::Contains("crashed: killed by signal 11"));
  }
  SECTION("correct but slow asks for speed") {
    auto f = describe_for_feedback(evaluated("ok", {true}, {0.5}), "", 1.0);
    CHECK_THAT(f, Catch::Contains("correct but not faster"));
  }
  SECTION("honesty flags") {
    auto r = evaluated("ok", {true}, {2.0});
    r.flags = {"mutates_input"};
    CHECK_THAT(describe_for_feedback(r, "", 1.0), Catch::Contains("flagged: mutates_input"));
  }
}

TEST_CASE("code comes from the fenced block that fits the language", "[generate]") {
  auto py = extract_code("Sure.\n```cpp\nint x;\n```\nand\n```python\ndef f():\n    pass\n```\n",
                         kernel_dsl::triton);
  CHECK(py.code == "def f():\n    pass\n");
  CHECK(py.why.empty());
  auto cu = extract_code("```python\nx = 1\n```\n```cuda\n__global__ void k() {}\n```",
                         kernel_dsl::cuda);
  CHECK(cu.code == "__global__ void k() {}\n");
  auto untagged = extract_code("text\n~~~\nimport torch\n~~~\n", kernel_dsl::pytorch);
  CHECK(untagged.code == "import torch\n");
  auto other = extract_code("```rust\nfn main() {}\n```", kernel_dsl::pytorch);
  CHECK(other.code == "fn main() {}\n");
  auto none = extract_code("I would rather not.", kernel_dsl::triton);
  CHECK(none.code.empty());
  CHECK_THAT(none.why, Catch::Contains("no fenced code block"));
  auto cut = extract_code("```python\nimport torch\ndef f(", kernel_dsl::triton);
  CHECK(cut.code.empty());
  CHECK_THAT(cut.why, Catch::Contains("not closed"));
  // A fence inside a string of the code does not end the block: only a fence line does.
  auto inner = extract_code("```python\ns = '```'\nx = 1\n```", kernel_dsl::triton);
  CHECK(inner.code == "s = '```'\nx = 1\n");
}

TEST_CASE("KernelAgent's kernel_function becomes the entry point", "[generate]") {
  auto code = std::string("import torch\n\ndef kernel_function(x):\n    return x.clamp(min=0)\n");
  auto exposed = expose_entry_point(code, "relu__default");
  CHECK_THAT(exposed, Catch::EndsWith("relu__default_kernel_impl = kernel_function\n"));
  auto own = std::string("def relu__default_kernel_impl(x):\n    return x\n");
  CHECK(expose_entry_point(own, "relu__default") == own);
  auto neither = std::string("def other(x):\n    return x\n");
  CHECK(expose_entry_point(neither, "relu__default") == neither);
}

TEST_CASE("versions go on until one is correct, and the best correct one stands", "[generate]") {
  version_policy policy;
  policy.max_versions = 3;
  version_history h;
  CHECK(h.wants_another(policy));
  auto v1 = evaluated("ok", {false}, {1.0});
  v1.version = 1;
  h.record(v1);
  CHECK(h.wants_another(policy));
  auto v2 = evaluated("ok", {true}, {0.5});
  v2.version = 2;
  h.record(v2);
  CHECK_FALSE(h.wants_another(policy));
  CHECK(h.standing().version == 2);
  SECTION("a slow correct version gets another try when asked, and the faster one stands") {
    policy.improve_when_slow = true;
    CHECK(h.wants_another(policy));
    auto v3 = evaluated("ok", {true}, {0.9});
    v3.version = 3;
    h.record(v3);
    CHECK_FALSE(h.wants_another(policy)); // three of three
    CHECK(h.standing().version == 3);
  }
  SECTION("a later incorrect version does not replace a correct one") {
    policy.max_versions = 5;
    policy.improve_when_slow = true;
    auto v3 = evaluated("crashed", {}, {});
    v3.version = 3;
    h.record(v3);
    CHECK(h.standing().version == 2);
  }
}

TEST_CASE("without a correct version the latest stands", "[generate]") {
  version_policy policy;
  policy.max_versions = 2;
  version_history h;
  auto v1 = evaluated("no_kernel", {}, {});
  v1.version = 1;
  h.record(v1);
  auto v2 = evaluated("compile_failed", {}, {});
  v2.version = 2;
  h.record(v2);
  CHECK_FALSE(h.wants_another(policy));
  CHECK(h.standing().version == 2);
  CHECK_FALSE(is_correct_result(h.standing()));
  CHECK(result_line(evaluated("ok", {true, false}, {1.0})).find("incorrect: 1/2") == 0);
}

TEST_CASE("KernelAgent's test code holds the suite's inputs and the aten operator", "[generate]") {
  auto b = make_op_brief("aten.leaky_relu.default", "", {"((T([8, 16], f16), 0.2,), {})"});
  auto t = agent_test_code(b);
  CHECK_THAT(t, Catch::Contains("OP = torch.ops.aten.leaky_relu.default"));
  CHECK_THAT(t, Catch::Contains("r\"\"\"((T([8, 16], f16), 0.2,), {})\"\"\""));
  CHECK_THAT(t, Catch::Contains("from kernel import kernel_function"));
  CHECK_THAT(t, Catch::Contains("atol=1e-2, rtol=1e-2"));
  auto p = agent_problem_description(b, "It was wrong.");
  CHECK_THAT(p, Catch::Contains("Operator: aten.leaky_relu.default"));
  CHECK_THAT(p, Catch::Contains("kernel_function"));
  CHECK_THAT(p, Catch::Contains("It was wrong."));
  auto add = agent_test_code(make_op_brief("aten.add.Tensor", "", {}));
  CHECK_THAT(add, Catch::Contains("OP = torch.ops.aten.add.Tensor"));
  CHECK_THAT(t, Catch::Contains("# Operator: aten.leaky_relu.default\n"));
  CHECK_THAT(t, Catch::Contains("PREVIOUSLY_FAILED = [\n]"));
}

TEST_CASE("KernelAgent's test code carries the previous version's evaluation to the kernel "
          "prompts", "[generate]") {
  auto b = make_op_brief("aten.tanh.default", "aten::tanh(Tensor self) -> Tensor",
                         {"((T([8, 16], f16),), {})"});
  // v1 was wrong on an input of the evaluation that is not among the examples.
  auto v1 = evaluated("ok", {true, false}, {});
  v1.version = 1;
  v1.correctness[1].error_msg = "Tensor-likes are not close!\n\nMismatched elements: 6 / 6";
  v1.correctness[1].traceback = "Traceback (most recent call last):\n  File \"kernel.py\"";
  v1.flags = {"mutates_input"};
  auto t = agent_test_code(b, v1);
  CHECK_THAT(t, Catch::Contains("# Schema: aten::tanh(Tensor self) -> Tensor"));
  CHECK_THAT(t, Catch::Contains("previous kernel (version 1) and it was wrong"));
  CHECK_THAT(t, Catch::Contains("#   ((T([3], f32),), {})\n"
                                "#     max absolute error 0.25, max relative error 0.5; "
                                "AssertionError: Tensor-likes are not close!\n"));
  CHECK_THAT(t, Catch::Contains("\n#       Traceback (most recent call last):\n#         File \"kernel.py\"\n"));
  CHECK_THAT(t, Catch::Contains("PREVIOUSLY_FAILED = [\n    (r\"\"\"((T([3], f32),), {})\"\"\", "
                                "\"max absolute error 0.25, max relative error 0.5; "
                                "AssertionError: Tensor-likes are not close!\"),\n]"));
  CHECK(t.find("((T([2], f32),), {})") == std::string::npos); // the input it got right
  CHECK_THAT(t, Catch::Contains("flagged it: mutates_input"));
  CHECK_THAT(t, Catch::Contains("previously failed case"));

  // A version without a kernel: what the agent's last round said reaches the next test.
  auto none = evaluated("no_kernel", {}, {});
  none.version = 2;
  none.detail = "v2: KernelAgent found no kernel (Failed to generate working kernel); its last "
                "round (worker 0, round 3) failed: case 1 failed: NameError: name 'tl' is not "
                "defined\nThe output of that round:\ncase 1 failed";
  auto after = agent_test_code(b, none);
  CHECK_THAT(after, Catch::Contains("# The previous attempt (version 2) failed as a whole: no_kernel."));
  CHECK_THAT(after, Catch::Contains("# v2: KernelAgent found no kernel (Failed to generate working "
                                    "kernel); its last round (worker 0, round 3) failed: case 1 "
                                    "failed: NameError"));
  CHECK_THAT(after, Catch::Contains("\n# The output of that round:\n"));
  // A string the test prints is a valid Python literal however the error reads.
  auto quoted = evaluated("ok", {false}, {});
  quoted.version = 1;
  quoted.correctness[0].error_msg = "expected \"a\\b\"";
  CHECK_THAT(agent_test_code(b, quoted), Catch::Contains("AssertionError: expected \\\"a\\\\b\\\"\"),"));
}

TEST_CASE("a version that cannot be scored here ends the operator's versions", "[generate]") {
  version_policy policy;
  version_history h;
  auto v1 = evaluated("needs_cuda", {}, {});
  v1.detail = "a .cu kernel on a node without a GPU";
  v1.version = 1;
  h.record(v1);
  CHECK_FALSE(h.wants_another(policy));
  CHECK(h.standing().outcome == bb::outcome::needs_cuda);
}

TEST_CASE("the flag --dsl: cutedsl and helion ask for .py kernels with their languages' ABI", "[generate]") {
  auto b = make_op_brief("aten.relu.default", "aten::relu(Tensor self) -> Tensor", {});
  auto cute = kernel_prompt(b, kernel_dsl::cutedsl, "");
  CHECK_THAT(cute, Catch::Contains("fast CuTe DSL kernel"));
  CHECK_THAT(cute, Catch::Contains("nvidia-cutlass-dsl"));
  CHECK_THAT(cute, Catch::Contains("relu__default_cutedsl_kernel with `@cute.kernel`"));
  CHECK_THAT(cute, Catch::Contains("relu__default_kernel_launch with `@cute.jit`"));
  CHECK_THAT(cute, Catch::Contains("`relu__default_kernel_impl`"));
  CHECK_THAT(cute, Catch::Contains("```python"));
  auto helion = kernel_prompt(b, kernel_dsl::helion, "");
  CHECK_THAT(helion, Catch::Contains("fast Helion kernel"));
  CHECK_THAT(helion, Catch::Contains("relu__default_helion_kernel with `@helion.kernel()`"));
  CHECK_THAT(helion, Catch::Contains("hl.tile"));
  CHECK_THAT(helion, !Catch::Contains("FOLDER"));
  for (auto name : {"cutedsl", "helion"}) {
    kernel_dsl d;
    REQUIRE(from_string(name, d));
    CHECK(std::string(to_string(d)) == name);
    CHECK(kind_of(d) == kernel_kind::py);
  }
}

TEST_CASE("KernelAgent's test with a served cluster sends kernel.py there and keeps its cases",
          "[generate]") {
  auto b = make_op_brief("aten.relu.default", "relu(Tensor self) -> Tensor", {"((T([4], f32),), {})"});
  agent_service service;
  service.address = "tcp://10.0.0.7:5590";
  service.keys = "/keys \"here\"";
  service.client_path = "/opt/bbcluster/bin/python-client";
  service.data = "/data/traces.txt";
  service.topn = 3;
  auto t = agent_test_code(b, {}, service);
  CHECK_THAT(t, Catch::Contains("\"address\": \"tcp://10.0.0.7:5590\",\n"));
  CHECK_THAT(t, Catch::Contains("\"keys\": \"/keys \\\"here\\\"\",\n"));
  CHECK_THAT(t, Catch::Contains("\"op\": \"aten.relu.default\",\n"));
  CHECK_THAT(t, Catch::Contains("\"suite\": \"torchbench\",\n"));
  CHECK_THAT(t, Catch::Contains("\"topn\": 3,\n"));
  CHECK_THAT(t, Catch::Contains("entry=\"kernel_function\""));
  // Its run asks the service; the local cases stay for the model to read.
  CHECK_THAT(t, Catch::EndsWith("    sys.exit(0 if test_on_service() else 1)\n"));
  CHECK_THAT(t, Catch::Contains("CASES = [\n    r\"\"\"((T([4], f32),), {})\"\"\",\n"));
  // Without an address, the local test.
  CHECK(agent_test_code(b, {}, agent_service{}) == agent_test_code(b));
  CHECK_THAT(agent_test_code(b), Catch::EndsWith("    sys.exit(0 if test_kernel() else 1)\n"));
}
