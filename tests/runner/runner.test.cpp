// Torch first: c10's logging defines a CHECK of its own, which Catch's must replace.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <catch2/catch.hpp>

#include "runner/jobs.hpp"

#include <cmath>
#include <limits>

#include "runner/compare.hpp"
#include "runner/inputs.hpp"
#include "runner/runner.hpp"
#include "runner/timing.hpp"

using namespace bb;
using namespace bb::runner;

namespace {

constexpr double tol = 1e-2;

c10::IValue tensor(std::vector<double> xs) {
  return at::tensor(xs, at::kFloat);
}

const c10::FunctionSchema& schema_of(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

} // namespace

TEST_CASE("allclose: equal, within tolerance, and beyond it", "[runner]") {
  CHECK(compare(tensor({1, 2}), tensor({1, 2}), tol, tol).ok);
  // |ref - res| <= atol + rtol * |res|: 0.019 <= 0.01 + 0.01 * 1.0
  CHECK(compare(tensor({1.019}), tensor({1.0}), tol, tol).ok);
  auto far = compare(tensor({1.5, 2}), tensor({1.0, 2}), tol, tol);
  CHECK_FALSE(far.ok);
  CHECK(far.max_abs_error == Approx(0.5));
  CHECK(far.max_rel_error == Approx(0.5 / 1.5));
  CHECK(far.message.find("Mismatched elements: 1 / 2 (50") != std::string::npos);
}

TEST_CASE("allclose: NaN equals NaN, infinities compare equal", "[runner]") {
  auto nan = std::numeric_limits<double>::quiet_NaN();
  auto inf = std::numeric_limits<double>::infinity();
  auto c = compare(tensor({nan, inf, -inf}), tensor({nan, inf, -inf}), tol, tol);
  CHECK(c.ok);
  CHECK(c.max_abs_error == 0.0);
  CHECK_FALSE(compare(tensor({nan}), tensor({1.0}), tol, tol).ok);
  CHECK_FALSE(compare(tensor({inf}), tensor({-inf}), tol, tol).ok);
}

TEST_CASE("allclose: shape, dtype and device must match", "[runner]") {
  auto shape = compare(at::zeros({2, 2}), at::zeros({4}), tol, tol);
  CHECK_FALSE(shape.ok);
  CHECK(shape.message.find("'shape'") != std::string::npos);
  auto dtype = compare(at::zeros({2}), at::zeros({2}, at::kDouble), tol, tol);
  CHECK_FALSE(dtype.ok);
  CHECK(dtype.message.find("'dtype'") != std::string::npos);
  auto meta = compare(at::zeros({2}), at::zeros({2}, at::TensorOptions().device(at::kMeta)), tol, tol);
  CHECK_FALSE(meta.ok);
  CHECK(meta.message.find("'device'") != std::string::npos);
}

TEST_CASE("allclose: nested lists and tuples recursively, with equal lengths", "[runner]") {
  auto ref = c10::ivalue::Tuple::create({tensor({1}), c10::IValue(c10::List<at::Tensor>({at::ones({2})}))});
  auto same = c10::ivalue::Tuple::create({tensor({1}), c10::IValue(c10::List<at::Tensor>({at::ones({2})}))});
  auto off = c10::ivalue::Tuple::create({tensor({1}), c10::IValue(c10::List<at::Tensor>({at::zeros({2})}))});
  CHECK(compare(ref, same, tol, tol).ok);
  auto c = compare(ref, off, tol, tol);
  CHECK_FALSE(c.ok);
  CHECK(c.max_abs_error == Approx(1.0));
  CHECK(c.message.find("item [1]") != std::string::npos);
  auto shorter = c10::ivalue::Tuple::create({tensor({1})});
  CHECK_FALSE(compare(ref, shorter, tol, tol).ok);
}

TEST_CASE("allclose: non-tensor values", "[runner]") {
  CHECK(compare(c10::IValue(3), c10::IValue(3), tol, tol).ok);
  CHECK_FALSE(compare(c10::IValue(3), c10::IValue(4), tol, tol).ok);
  CHECK(compare(c10::IValue(1.0), c10::IValue(1.001), tol, tol).ok);
  CHECK_FALSE(compare(c10::IValue(true), c10::IValue(false), tol, tol).ok);
  CHECK(compare(c10::IValue(), c10::IValue(), tol, tol).ok);
  CHECK_FALSE(compare(c10::IValue(std::string("a")), c10::IValue(std::string("b")), tol, tol).ok);
  CHECK_FALSE(compare(tensor({1}), c10::IValue(1.0), tol, tol).ok);
}

TEST_CASE("tensors are built as make_tensor builds them, seeded per input", "[runner]") {
  args::tensor_spec f{{64, 64}, "f32", false, {}};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(input_seed("aten.relu.default", "x"));
  auto t = make_tensor(f, gen, at::kCPU);
  CHECK(t.min().item<float>() >= 0.0f);
  CHECK(t.max().item<float>() < 1.0f);
  args::tensor_spec i{{1000}, "i64", false, {}};
  auto ti = make_tensor(i, gen, at::kCPU);
  CHECK(ti.min().item<int64_t>() >= -9);
  CHECK(ti.max().item<int64_t>() <= 9);
  CHECK(ti.min().item<int64_t>() < 0);
  args::tensor_spec b{{100}, "b8", false, {}};
  CHECK(make_tensor(b, gen, at::kCPU).scalar_type() == at::kBool);
  args::tensor_spec strided{{3, 4}, "f16", true, {0, 1}};
  auto ts = make_tensor(strided, gen, at::kCPU);
  CHECK(ts.strides() == at::IntArrayRef({0, 1}));
  CHECK(ts.storage().nbytes() == 4 * 2); // 1 + (3-1)*0 + (4-1)*1 = 4 elements
  args::tensor_spec empty{{0, 5}, "f32", false, {}};
  CHECK(make_tensor(empty, gen, at::kCPU).numel() == 0);
  args::tensor_spec scalar{{}, "f64", false, {}};
  CHECK(make_tensor(scalar, gen, at::kCPU).dim() == 0);

  auto again = [&](uint64_t seed) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
    return make_tensor(f, g, at::kCPU);
  };
  CHECK(at::equal(again(input_seed("op", "a")), again(input_seed("op", "a"))));
  CHECK_FALSE(at::equal(again(input_seed("op", "a")), again(input_seed("op", "b"))));
}

TEST_CASE("calls are built against the schema: kwargs, int lists, dtypes, devices", "[runner]") {
  auto& schema = schema_of("aten::sum", "dim_IntList");
  auto parsed = std::get<args::call>(args::parse_call("((T([2, 3], f32), [1], True), {'dtype': torch.float64})"));
  auto call = build_call(parsed, schema, 1, at::kCPU);
  auto stack = make_stack(call, schema);
  c10::Dispatcher::singleton().findSchemaOrThrow("aten::sum", "dim_IntList").callBoxed(stack);
  REQUIRE(stack.size() == 1);
  auto out = stack[0].toTensor();
  CHECK(out.scalar_type() == at::kDouble);
  CHECK(out.sizes() == at::IntArrayRef({2, 1}));

  auto& empty_like = schema_of("aten::empty_like", "");
  auto p2 = std::get<args::call>(args::parse_call(
    "((T([4], f16),), {'dtype': f32, 'device': \"torch.device('cuda')\", 'pin_memory': False})"));
  auto c2 = build_call(p2, empty_like, 1, at::kCPU);
  CHECK(c2.kwargs.at("device").toDevice() == at::Device(at::kCPU));
}

TEST_CASE("on the CPU, max_pool2d_with_indices_backward's indices stay inside their plane",
          "[runner]") {
  // aten's CPU kernel writes through the indices unchecked; make_tensor's -9..9 would write
  // before the buffer. The real trace line of the included set, at a CPU size.
  auto& schema = schema_of("aten::max_pool2d_with_indices_backward", "");
  auto parsed = std::get<args::call>(args::parse_call(
    "((T([2, 3, 5, 5], f16, stride=(75, 25, 5, 1)), T([2, 3, 5, 5], f16), [3, 3], [1, 1], [1, 1], "
    "[1, 1], False, T([2, 3, 5, 5], i64)), {})"));
  auto call = build_call(parsed, schema, input_seed("aten.max_pool2d_with_indices_backward.default", "x"),
                         at::kCPU);
  auto indices = call.args[7].toTensor();
  CHECK(indices.sizes() == at::IntArrayRef({2, 3, 5, 5}));
  CHECK(indices.min().item<int64_t>() >= 0);
  CHECK(indices.max().item<int64_t>() < 25);
  // The draws are make_tensor's, moved into the plane: a negative one wraps to its end.
  CHECK(indices.max().item<int64_t>() >= 16);
  auto stack = make_stack(call, schema);
  c10::Dispatcher::singleton().findSchemaOrThrow("aten::max_pool2d_with_indices_backward", "").callBoxed(stack);
  CHECK(stack[0].toTensor().sizes() == at::IntArrayRef({2, 3, 5, 5}));
  // Other operators' integer tensors are left as drawn.
  auto& add = schema_of("aten::add", "Tensor");
  auto p2 = std::get<args::call>(args::parse_call("((T([1000], i64), T([1000], i64)), {})"));
  CHECK(build_call(p2, add, 1, at::kCPU).args[0].toTensor().min().item<int64_t>() < 0);
}

TEST_CASE("evaluate_job runs the aten smoke job with cpu_bench timing", "[runner]") {
  eval_job job;
  job.job_id = 1;
  job.attempt = 1;
  job.op_name = "aten.relu.default";
  job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
  job.correctness_inputs = {"((T([2], f32),), {})"};
  job.performance_inputs = {"((T([64, 64], f32),), {})"};
  runner_options opts;
  opts.cpu_warmup = 1;
  opts.cpu_runs = 3;
  auto r = evaluate_job(job, opts, [](const step&) {});
  CHECK(r.outcome == bb::outcome::ok);
  REQUIRE(r.correctness.size() == 1);
  CHECK(r.correctness[0].is_correct);
  REQUIRE(r.performance.size() == 1);
  CHECK(r.performance[0].successfully_ran);
  CHECK(r.performance[0].reference_time_ms > 0.0);
  CHECK(r.performance[0].benchmark_time_ms > 0.0);
  CHECK(r.where.torch_version.rfind("2.", 0) == 0);

  job.op_name = "aten.no_such_op.default";
  auto missing = evaluate_job(job, opts, [](const step&) {});
  CHECK(missing.outcome == bb::outcome::unsupported);
  CHECK(missing.detail.find("unsupported op") == 0);
}

TEST_CASE("an input the reference rejects is a reference_error, not a crash", "[runner]") {
  eval_job job;
  job.op_name = "aten.mm.default";
  job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
  job.correctness_inputs = {"((T([2, 3], f32), T([4, 5], f32),), {})"};
  auto r = evaluate_job(job, runner_options{}, [](const step&) {});
  REQUIRE(r.correctness.size() == 1);
  CHECK_FALSE(r.correctness[0].is_correct);
  CHECK(r.correctness[0].error_type == "reference_error");
  CHECK_FALSE(r.correctness[0].error_msg.empty());
}

namespace {

using bb::test::aten_job;
using bb::test::quick_options;

} // namespace

TEST_CASE("an undefined tensor in an output (a masked backward output) compares like None",
          "[runner]") {
  at::Tensor undefined;
  auto some = at::ones({2});
  auto pair = [](c10::IValue a, c10::IValue b) { return c10::ivalue::Tuple::create({a, b}); };
  CHECK(compare(pair(undefined, some), pair(undefined, some), tol, tol).ok);
  CHECK(compare(pair(c10::IValue(), some), pair(undefined, some), tol, tol).ok);
  auto bad = compare(pair(undefined, some), pair(some, some), tol, tol);
  CHECK_FALSE(bad.ok);
  CHECK(bad.message.find("Expected None, got a tensor") != std::string::npos);
}

TEST_CASE("grid_sampler_2d_backward with a masked output: aten against itself is correct",
          "[runner]") {
  auto job = aten_job("aten.grid_sampler_2d_backward.default",
                      {"((T([1, 2, 5, 5], f32), T([1, 2, 5, 5], f32), T([1, 5, 5, 2], f32), 0, 0, "
                       "False, [False, True]), {})"});
  auto r = evaluate_job(job, quick_options(), [](const step&) {});
  INFO(r.detail);
  CHECK(r.outcome == bb::outcome::ok);
  REQUIRE(r.correctness.size() == 1);
  INFO(r.correctness[0].error_msg);
  CHECK(r.correctness[0].is_correct);
  CHECK(r.flags.empty());
  CHECK(r.performance[0].successfully_ran);
}

TEST_CASE("a kernel may alias and write what the operator itself does, and nothing more",
          "[runner]") {
  // _unsafe_view's schema has no alias annotation, yet aten returns a view of its input.
  auto view = evaluate_job(aten_job("aten._unsafe_view.default", {"((T([2, 3, 4], f32), [6, 4]), {})"}),
                           quick_options(), [](const step&) {});
  CHECK(view.flags.empty());
  CHECK(view.correctness[0].is_correct);
}

TEST_CASE("sparse COO outputs are built and compared", "[runner]") {
  auto job = aten_job("aten._sparse_coo_tensor_with_dims_and_tensors.default",
                      {"((1, 1, [9, 4], T([1, 5], i64), T([5, 4], f32)), {'dtype': f32, 'layout': "
                       "torch.sparse_coo, 'device': 'cuda', 'pin_memory': None})"});
  auto r = evaluate_job(job, quick_options(), [](const step&) {});
  INFO(r.detail);
  REQUIRE(r.correctness.size() == 1);
  INFO(r.correctness[0].error_msg);
  CHECK(r.correctness[0].is_correct);
  CHECK(r.flags.empty());
}

TEST_CASE("the runner tells which side each step runs, for the evaluator's timeouts", "[runner]") {
  std::vector<step> steps;
  evaluate_job(aten_job("aten.relu.default", {"((T([8], f32),), {})"}), quick_options(),
               [&](const step& s) { steps.push_back(s); });
  bool reference = false, kernel = false, timing = false;
  for (auto& s : steps) {
    reference = reference || (s.side == code_side::reference && s.input == input_kind::correctness && s.input_index == 0);
    kernel = kernel || s.side == code_side::kernel;
    timing = timing || (s.side == code_side::reference && s.text.find("timing the reference") != std::string::npos);
  }
  CHECK(reference);
  CHECK(timing);
  // With the aten backend the kernel is aten itself: its steps are the reference's too.
  CHECK_FALSE(kernel);
}

TEST_CASE("a shard numbers its inputs among its operator's, and indexes them from its own first",
          "[runner]") {
  auto job = aten_job("aten.relu.default", {"((T([8], f32),), {})", "((T([4], f32),), {})"});
  job.shard = {5, 2, 9, 5, 2, 9};
  std::vector<step> steps;
  auto r = evaluate_job(job, quick_options(), [&](const step& s) { steps.push_back(s); });
  CHECK(r.shard.correctness_begin == 5);
  bool sixth = false, seventh = false;
  for (auto& s : steps) {
    sixth = sixth || (s.text.rfind("correctness input 6/9", 0) == 0 && s.input_index == 0);
    seventh = seventh || (s.text.rfind("performance input 7/9", 0) == 0 && s.input_index == 1);
  }
  CHECK(sixth);
  CHECK(seventh);
}

TEST_CASE("a bool where the schema wants a Scalar is passed as Python passes it", "[runner]") {
  auto r = evaluate_job(aten_job("aten.eq.Scalar", {"((T([6, 4], b8), False), {})"}), quick_options(),
                        [](const step&) {});
  INFO(r.detail);
  CHECK(r.outcome == bb::outcome::ok);
  REQUIRE(r.correctness.size() == 1);
  INFO(r.correctness[0].error_msg);
  CHECK(r.correctness[0].is_correct);
}

TEST_CASE("inputs the evaluator left out are reference errors without running", "[runner]") {
  auto job = aten_job("aten.relu.default", {"((T([8], f32),), {})", "((T([4], f32),), {})"});
  job.reference_failures.push_back({input_kind::correctness, 0, "the reference ran past the call timeout"});
  job.reference_failures.push_back({input_kind::performance, 0, "the reference ran past the call timeout"});
  auto r = evaluate_job(job, quick_options(), [](const step&) {});
  CHECK(r.correctness[0].error_type == "reference_error");
  CHECK(r.correctness[1].is_correct);
  CHECK(r.performance[0].error_msg.rfind("reference_error: ", 0) == 0);
  CHECK(r.performance[1].successfully_ran);
}

TEST_CASE("timings come in alternating rounds with a confidence interval, and a cached reference "
          "time is calibrated, never taken as it is",
          "[runner]") {
  auto job = aten_job("aten.relu.default", {"((T([256, 256], f32),), {})"});
  auto opts = quick_options();
  opts.cpu_runs = 10;
  opts.rounds = 5;
  // Outliers measured again, as by default: the stale cached figure below must not make one.
  opts.suspicious_speedup = bb::runner_options{}.suspicious_speedup;
  // One intra-op thread: a call of microseconds split over two threads waits for the second
  // (asleep, or its core taken by another test) now and then, and a few such calls among ten
  // make aten look 20x faster or slower than itself.
  int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct restore_threads {
    int n;
    ~restore_threads() { at::set_num_threads(n); }
  } restore{threads};
  auto r = evaluate_job(job, opts, [](const step&) {});
  REQUIRE(r.performance.size() == 1);
  auto& p = r.performance[0];
  CHECK(p.successfully_ran);
  CHECK(p.timing_rounds == 5);
  CHECK(p.speedup_ci_low > 0.0);
  CHECK(p.speedup_ci_low <= p.speedup);
  CHECK(p.speedup <= p.speedup_ci_high);
  CHECK(p.reference_round_means_ms.size() == 5);
  CHECK_FALSE(p.reference_cached);
  for (auto phase : {"build_inputs", "reference_calls", "first_kernel_call", "compare", "honesty",
                     "time_reference", "time_kernel"})
    CHECK(r.phases.count(phase) == 1);

  // With the reference's timing given by the cache, the reference is calibrated now: the
  // figure measured in this run counts, never the cached one (a bogus 123 ms here, which as
  // it stood would make aten's relu look 1000 times faster than itself).
  job.cached_references.push_back({0, 123.0, {120.0, 126.0}});
  auto cached = evaluate_job(job, opts, [](const step&) {});
  auto& c = cached.performance[0];
  INFO(c.error_msg);
  CHECK(c.successfully_ran);
  CHECK(c.reference_cached);
  CHECK(c.reference_time_ms < 123.0 / 10);
  CHECK(c.reference_drift == Approx(c.reference_time_ms / 123.0 - 1.0));
  CHECK(c.reference_drift < -0.9);
  CHECK(c.speedup < 10.0);
  CHECK(c.timer == "cpu_bench");
  CHECK(c.timing_rounds == 5);
  CHECK(c.unverified_speedup == 0.0);
  CHECK(cached.flags.empty());
  // The stale figure is replaced: the calibration's round means are what the cache keeps now.
  CHECK(c.reference_round_means_ms.size() == 5);

  // A cached figure within 5% of its calibration stays (a CPU's figures move more than that
  // between runs, so the rule is checked as it is).
  CHECK(cache_keeps(false, 0.0));
  CHECK(cache_keeps(true, 0.06));
  CHECK(cache_keeps(true, -0.06));
  CHECK_FALSE(cache_keeps(true, 0.04));
  CHECK_FALSE(cache_keeps(true, -0.05));
}

TEST_CASE("the speedup interval: wide for noisy rounds, absent for one round", "[runner]") {
  side_timing steady{1.0, {1.0, 1.01, 0.99, 1.0, 1.0}, 50};
  side_timing noisy{1.0, {0.5, 1.5, 0.7, 1.3, 1.0}, 50};
  auto tight = estimate_speedup(steady, steady);
  CHECK(tight.speedup == Approx(1.0));
  CHECK(tight.ci_low < 1.0);
  CHECK(tight.ci_high > 1.0);
  CHECK(tight.ci_high - tight.ci_low < 0.05);
  auto wide = estimate_speedup(noisy, steady);
  CHECK(wide.ci_high - wide.ci_low > 0.5);
  side_timing faster{0.5, {0.5, 0.5, 0.51, 0.49, 0.5}, 50};
  auto clear = estimate_speedup(steady, faster);
  CHECK(clear.speedup == Approx(2.0));
  CHECK(clear.ci_low > 1.9);
  side_timing once{1.0, {1.0}, 1};
  auto none = estimate_speedup(once, steady);
  CHECK(none.ci_low == 0.0);
  CHECK(none.ci_high == 0.0);
}

TEST_CASE("a job with a stream tag tells each input's records as the input ends", "[runner]") {
  auto job = aten_job("aten.relu.default", {"((T([8], f32),), {})", "((T([16], f32),), {})"});
  auto opts = quick_options();
  struct told {
    bool correctness = false;
    bool performance = false;
    correctness_record c;
    performance_record p;
    uint32_t index = 0;
  };
  std::vector<told> inputs;
  auto collect = [&](const step& s) {
    if (!s.correctness && !s.performance)
      return;
    told t;
    t.index = s.input_index;
    if (s.correctness) {
      t.correctness = true;
      t.c = *s.correctness;
    }
    if (s.performance) {
      t.performance = true;
      t.p = *s.performance;
    }
    inputs.push_back(t);
  };
  // Without a tag, nothing is told but the steps.
  evaluate_job(job, opts, collect);
  CHECK(inputs.empty());

  // With one: the same inputs checked and timed, so one message per input with both records,
  // in order, each what the result holds.
  job.stream_tag = "client\nrequest";
  auto r = evaluate_job(job, opts, collect);
  REQUIRE(inputs.size() == 2);
  for (uint32_t i = 0; i < 2; ++i) {
    CHECK(inputs[i].index == i);
    CHECK(inputs[i].correctness);
    CHECK(inputs[i].performance);
    CHECK(inputs[i].c.args == r.correctness[i].args);
    CHECK(inputs[i].c.is_correct == r.correctness[i].is_correct);
    CHECK(inputs[i].p.args == r.performance[i].args);
    CHECK(inputs[i].p.successfully_ran);
  }

  // Lists that differ: each correctness input, then each performance input, alone.
  inputs.clear();
  job.performance_inputs = {"((T([32], f32),), {})"};
  evaluate_job(job, opts, collect);
  REQUIRE(inputs.size() == 3);
  CHECK((inputs[0].correctness && !inputs[0].performance && inputs[0].index == 0));
  CHECK((inputs[1].correctness && !inputs[1].performance && inputs[1].index == 1));
  CHECK((!inputs[2].correctness && inputs[2].performance && inputs[2].index == 0));
}
