// Torch first: c10's logging defines a CHECK of its own, which Catch's must replace.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <catch2/catch.hpp>

#include "runner/jobs.hpp"

#include "skip.hpp"

#include <algorithm>
#include <dlfcn.h>
#include <fstream>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runner/code_guard.hpp"
#include "runner/guards.hpp"
#include "runner/inputs.hpp"
#include "runner/runner.hpp"
#include "runner/timing.hpp"

using namespace bb;
using namespace bb::runner;

namespace {

const c10::FunctionSchema& schema_of(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

built_call parsed_call(const char* text, const char* name, const char* overload, uint64_t seed) {
  auto parsed = std::get<args::call>(args::parse_call(text));
  return build_call(parsed, schema_of(name, overload), seed, at::kCPU);
}

bool all_true(const at::Tensor& t) {
  return t.all().item<bool>();
}

bool any_true(const at::Tensor& t) {
  return t.any().item<bool>();
}

bool contains(const std::vector<std::string>& xs, const std::string& prefix) {
  return std::any_of(xs.begin(), xs.end(), [&](const std::string& x) { return x.rfind(prefix, 0) == 0; });
}

using bb::test::aten_job;
using bb::test::quick_options;

} // namespace

TEST_CASE("refresh_floats refills float and complex storages from its seed, not integers",
          "[runner]") {
  // where.self: a bool condition, a float self and an int64 other, built as make_tensor does.
  auto call = parsed_call("((T([64], b8), T([64], f32), T([64], i64)), {})", "aten::where", "self", 7);
  auto original = clone_call(call);
  refresh_floats(call, 11, at::kCPU);
  auto mask = call.args[0].toTensor(), x = call.args[1].toTensor(), idx = call.args[2].toTensor();
  CHECK(x.scalar_type() == at::kFloat);
  CHECK_FALSE(at::equal(x, original.args[1].toTensor()));
  CHECK(x.min().item<float>() >= 0.0f);
  CHECK(x.max().item<float>() < 1.0f);
  CHECK(at::equal(mask, original.args[0].toTensor()));
  CHECK(at::equal(idx, original.args[2].toTensor()));

  // The same seed gives the same values; another seed others.
  auto again = clone_call(original), other = clone_call(original);
  refresh_floats(again, 11, at::kCPU);
  refresh_floats(other, 12, at::kCPU);
  CHECK(at::equal(again.args[1].toTensor(), x));
  CHECK_FALSE(at::equal(other.args[1].toTensor(), x));

  // A strided view with gaps: every element of its storage is refilled, the gaps too.
  auto base = at::full({10}, -5.0f);
  auto gapped = base.as_strided({3}, {3}, 1);
  built_call strided;
  strided.args.push_back(gapped);
  refresh_floats(strided, 3, at::kCPU);
  CHECK(all_true(base.ge(0.0f)));
  CHECK(all_true(base.lt(1.0f)));

  // Complex tensors are refilled too, both parts, each in [0, 1).
  built_call complex;
  auto z = at::full({16}, c10::complex<float>(-2.0f, -2.0f), at::TensorOptions().dtype(at::kComplexFloat));
  complex.kwargs.emplace("z", z);
  refresh_floats(complex, 5, at::kCPU);
  auto parts = at::view_as_real(z);
  CHECK(all_true(parts.ge(0.0f)));
  CHECK(all_true(parts.lt(1.0f)));
  CHECK(any_true(parts.select(1, 1).ne(parts.select(1, 0))));
}

TEST_CASE("refresh_floats fills half, bfloat16 and double storages from 0 to 1, the same for any thread count",
          "[runner]") {
  for (auto dtype : {at::kHalf, at::kBFloat16, at::kDouble, at::kFloat}) {
    INFO(c10::toString(dtype));
    auto make = [&] {
      built_call call;
      call.args.push_back(at::full({100000}, -7.0, at::TensorOptions().dtype(dtype)));
      return call;
    };
    auto a = make(), b = make(), c = make();
    int threads = at::get_num_threads();
    at::set_num_threads(1);
    refresh_floats(a, 21, at::kCPU);
    at::set_num_threads(2);
    refresh_floats(b, 21, at::kCPU);
    at::set_num_threads(threads);
    refresh_floats(c, 22, at::kCPU);
    auto x = a.args[0].toTensor().to(at::kDouble);
    CHECK(x.min().item<double>() >= 0.0);
    CHECK(x.max().item<double>() < 1.0);
    CHECK(std::abs(x.mean().item<double>() - 0.5) < 0.01);
    // As many distinct values as the dtype has in [0, 1), near enough (bfloat16: a few hundred).
    CHECK(std::get<0>(at::_unique(x)).numel() > 200);
    // On the dtype's grid in [0, 1): k / 2^11 for half, k / 2^8 for bfloat16, k / 2^24 for
    // float, k / 2^53 for double (and finer than a float's there).
    double grid = dtype == at::kHalf ? 2048.0 : dtype == at::kBFloat16 ? 256.0 : dtype == at::kFloat ? 16777216.0 : 0x1p53;
    if (dtype == at::kDouble)
      CHECK_FALSE(at::equal(at::floor(x * 16777216.0), x * 16777216.0));
    CHECK(at::equal(at::floor(x * grid), x * grid));
    CHECK(at::equal(a.args[0].toTensor(), b.args[0].toTensor()));
    CHECK_FALSE(at::equal(a.args[0].toTensor(), c.args[0].toTensor()));
  }
}

TEST_CASE("copy_value_into copies into the same memory where shapes match, else clones",
          "[runner]") {
  auto src = at::rand({4, 5});
  c10::IValue dst = clone_value(c10::IValue(at::zeros({4, 5})));
  auto* before = dst.toTensor().data_ptr();
  copy_value_into(dst, c10::IValue(src));
  CHECK(dst.toTensor().data_ptr() == before);
  CHECK(at::equal(dst.toTensor(), src));
  CHECK(dst.toTensor().data_ptr() != src.data_ptr());

  // A tuple with an undefined tensor, as a masked backward returns it.
  auto pair = c10::ivalue::Tuple::create({c10::IValue(at::rand({3})), c10::IValue(at::Tensor())});
  c10::IValue slot = clone_value(c10::IValue(pair));
  auto* first = slot.toTupleRef().elements()[0].toTensor().data_ptr();
  auto other = c10::ivalue::Tuple::create({c10::IValue(at::rand({3})), c10::IValue(at::Tensor())});
  copy_value_into(slot, c10::IValue(other));
  CHECK(slot.toTupleRef().elements()[0].toTensor().data_ptr() == first);
  CHECK(at::equal(slot.toTupleRef().elements()[0].toTensor(), other->elements()[0].toTensor()));

  // Another shape or dtype: a clone of the source.
  auto wider = at::rand({4, 6});
  copy_value_into(dst, c10::IValue(wider));
  CHECK(dst.toTensor().sizes() == wider.sizes());
  CHECK(at::equal(dst.toTensor(), wider));
  CHECK(dst.toTensor().data_ptr() != wider.data_ptr());
  auto as_double = at::rand({4, 6}, at::TensorOptions().dtype(at::kDouble));
  copy_value_into(dst, c10::IValue(as_double));
  CHECK(dst.toTensor().scalar_type() == at::kDouble);

  // A call, argument by argument.
  built_call from, into;
  from.args.push_back(at::rand({8}));
  from.kwargs.emplace("alpha", c10::IValue(2.0));
  into = clone_call(from);
  auto* arg = into.args[0].toTensor().data_ptr();
  from.args[0].toTensor().fill_(0.25);
  copy_call_into(into, from);
  CHECK(into.args[0].toTensor().data_ptr() == arg);
  CHECK(at::equal(into.args[0].toTensor(), from.args[0].toTensor()));
  CHECK(into.kwargs.at("alpha").toDouble() == 2.0);
}

TEST_CASE("call_seed differs by call, warm-up and measurement, a checked call's by round and rank alone",
          "[runner]") {
  // (input seed, measurement, round, index, timed, checked rank or -1)
  CHECK(call_seed(1, 0, 2, 3, true, -1) == call_seed(1, 0, 2, 3, true, -1));
  CHECK(call_seed(1, 0, 2, 3, true, -1) != call_seed(1, 0, 2, 4, true, -1));
  CHECK(call_seed(1, 0, 2, 3, true, -1) != call_seed(1, 0, 3, 3, true, -1));
  CHECK(call_seed(1, 0, 2, 3, true, -1) != call_seed(2, 0, 2, 3, true, -1));
  // A checked call: the same values wherever it falls in its round, others for the other rank.
  CHECK(call_seed(1, 0, 2, 3, true, 0) == call_seed(1, 0, 2, 7, true, 0));
  CHECK(call_seed(1, 0, 2, 3, true, 0) != call_seed(1, 0, 2, 3, true, 1));
  CHECK(call_seed(1, 0, 2, 3, true, 0) != call_seed(1, 0, 3, 3, true, 0));
  CHECK(call_seed(1, 0, 2, 3, true, 0) != call_seed(1, 0, 2, 3, true, -1));
  // A warm-up call and a measurement again never see a first measurement's values.
  CHECK(call_seed(1, 0, 0, 3, false, -1) != call_seed(1, 0, 0, 3, true, -1));
  CHECK(call_seed(1, 1, 2, 3, true, -1) != call_seed(1, 0, 2, 3, true, -1));
  CHECK(call_seed(1, 1, 2, 3, true, 0) != call_seed(1, 0, 2, 3, true, 0));
  // Every call of five rounds of eight (two checked), with eight warm-up calls, distinct.
  std::set<uint64_t> seen;
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t i = 0; i < 8; ++i)
      seen.insert(call_seed(99, 0, r, i, true, i == 2 ? 0 : i == 5 ? 1 : -1));
  for (int64_t i = 0; i < 8; ++i)
    seen.insert(call_seed(99, 0, 0, i, false, -1));
  CHECK(seen.size() == 48);
}

TEST_CASE("checked_slot keeps the first calls, then a reservoir sample the same for both sides",
          "[runner]") {
  constexpr size_t slots = 6;
  for (uint64_t n = 0; n < slots; ++n)
    CHECK(checked_slot(n, slots, 0) == static_cast<int64_t>(n));
  // Beyond the slots: the same answer every time (both sides ask), a slot or none.
  std::map<int64_t, int> placed_in_all;
  for (uint64_t measurement = 0; measurement < 5; ++measurement) {
    std::map<int64_t, int> placed;
    for (uint64_t n = slots; n < 2000; ++n) {
      auto j = checked_slot(n, slots, measurement);
      CHECK(j == checked_slot(n, slots, measurement));
      CHECK(j >= -1);
      CHECK(j < static_cast<int64_t>(slots));
      ++placed[j];
      ++placed_in_all[j];
    }
    // As reservoir sampling: call n kept with probability slots / (n + 1).
    CHECK(placed[-1] > 1900);
  }
  // Spread over the slots: about 35 calls a measurement are kept, so one measurement leaves
  // some slot unused about once in a hundred (the process's secret draws them); five together
  // leave none.
  CHECK(placed_in_all.size() == slots + 1);
}

TEST_CASE("poison_prefix_for covers four times the outputs, at least 8 MiB", "[runner]") {
  auto small = at::zeros({16});
  CHECK(poison_prefix_for(small) == size_t(8) << 20);
  auto big = at::zeros({4 << 20}); // 16 MiB
  auto pair = c10::ivalue::Tuple::create({big, at::Tensor()});
  CHECK(poison_prefix_for(pair) == size_t(64) << 20);
}

TEST_CASE("poison_outputs writes the canary into outputs but not into what it keeps", "[runner]") {
  auto input = at::arange(8, at::kFloat);
  built_call keep;
  keep.args.push_back(input);
  auto f = at::zeros({4}, at::kFloat);
  auto i = at::zeros({4}, at::kLong);
  auto b = at::zeros({4}, at::kBool);
  auto view = input.slice(0, 2, 6); // an output that is a view of an input
  // A view into the middle of a bigger buffer: the whole buffer is poisoned.
  auto buffer = at::zeros({10}, at::kFloat);
  auto middle = buffer.slice(0, 3, 5);
  c10::List<at::Tensor> list({at::zeros({3}, at::kDouble)});
  auto out = c10::ivalue::Tuple::create({f, i, b, view, middle, c10::IValue(list)});
  poison_outputs(out, keep);
  CHECK(all_true(at::isnan(f)));
  CHECK(all_true(i.eq(-1)));
  // A mask never written reads true and false in turn, not all of either.
  CHECK(at::equal(b, at::arange(4, at::kLong).remainder(2).eq(0)));
  CHECK(at::equal(input, at::arange(8, at::kFloat)));
  CHECK(all_true(at::isnan(buffer)));
  CHECK(all_true(at::isnan(list.get(0))));

  // The same output twice (a tuple of aliases) is poisoned once, without harm.
  auto twice = at::zeros({2}, at::kInt);
  poison_outputs(c10::ivalue::Tuple::create({twice, twice}), built_call{});
  CHECK(all_true(twice.eq(-1)));
}

TEST_CASE("extra_inputs makes signed and special-valued clones of the float tensors", "[runner]") {
  auto call = parsed_call("((T([20], f32), T([1000], f32)), {})", "aten::add", "Tensor", 3);
  call.kwargs.emplace("idx", at::arange(20, at::kLong));
  auto original = clone_call(call);
  auto variants = extra_inputs(call, 5, at::kCPU);
  REQUIRE(variants.size() == 2);
  CHECK(variants[0].name == "signed values");
  CHECK(variants[1].name == "special values");

  for (size_t a = 0; a < 2; ++a) {
    auto t = variants[0].call.args[a].toTensor();
    CHECK(any_true(t.lt(0.0f)));
    CHECK(all_true(t.ge(-3.0f)));
    CHECK(all_true(t.lt(3.0f)));
  }
  // Special values even in a tensor of 20 elements.
  for (size_t a = 0; a < 2; ++a) {
    auto t = variants[1].call.args[a].toTensor();
    CHECK(any_true(t.eq(0.0f)));
    CHECK(any_true(at::isposinf(t)));
    CHECK(any_true(at::isneginf(t)));
    CHECK(any_true(at::isnan(t)));
    CHECK(any_true(t.lt(0.0f) & at::isfinite(t)));
    auto finite = t.masked_select(at::isfinite(t));
    CHECK(all_true(finite.ge(-3.0f) & finite.lt(3.0f)));
  }
  for (auto& v : variants) {
    CHECK(at::equal(v.call.kwargs.at("idx").toTensor(), at::arange(20, at::kLong)));
    CHECK_FALSE(shares_storage(v.call.args[0], call.args[0]));
  }
  // The original is as it was.
  for (size_t a = 0; a < 2; ++a)
    CHECK(at::equal(call.args[a].toTensor(), original.args[a].toTensor()));
  CHECK(has_float_tensors(call));
  built_call ints;
  ints.args.push_back(at::arange(4, at::kLong));
  ints.args.push_back(at::zeros({0}, at::kFloat)); // empty: nothing to change
  CHECK_FALSE(has_float_tensors(ints));
}

TEST_CASE("not_plain names a meta tensor, and shares_storage sees views but not clones", "[runner]") {
  auto x = at::rand({4, 4});
  CHECK(not_plain(x).empty());
  CHECK(not_plain(at::rand({3}).to_sparse()).empty());
  auto meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
  CHECK_FALSE(not_plain(meta).empty());
  CHECK_FALSE(not_plain(c10::ivalue::Tuple::create({x, meta})).empty());
  CHECK(shares_storage(x, x.select(0, 1)));
  CHECK(shares_storage(c10::ivalue::Tuple::create({at::rand({2}), x}), x.t()));
  CHECK_FALSE(shares_storage(x.clone(), x.clone()));
  CHECK_FALSE(shares_storage(x, x.clone()));
}

TEST_CASE("dispatcher_fingerprint names an operator whose CPU kernel was replaced", "[runner]") {
  auto relu = c10::Dispatcher::singleton().findSchemaOrThrow("aten::relu", "");
  auto fp = dispatcher_fingerprint().with(relu);
  CHECK(fp.changed().empty());
  auto x = at::tensor({-1.0f, 2.0f});
  {
    torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    lib.impl("relu", [](const at::Tensor& t) { return t.clone(); });
    CHECK(at::relu(x).min().item<float>() == -1.0f); // the replacement is what runs
    CHECK(fp.changed() == std::vector<std::string>{"aten::relu"});
  }
  CHECK(at::relu(x).min().item<float>() == 0.0f);
  CHECK(fp.changed().empty());

  // The operators the evaluation relies on are watched too.
  {
    torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    lib.impl("add.Tensor", [](const at::Tensor& a, const at::Tensor&, const at::Scalar&) { return a.clone(); });
    CHECK(fp.changed() == std::vector<std::string>{"aten::add.Tensor"});
  }
  CHECK(fp.changed().empty());

  // Without the operator evaluated: the relied-on ones alone.
  dispatcher_fingerprint relied;
  CHECK(relied.changed().empty());
  {
    torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    lib.impl("eq.Tensor", [](const at::Tensor& a, const at::Tensor&) { return a.clone(); });
    CHECK(relied.changed() == std::vector<std::string>{"aten::eq.Tensor"});
  }
}

TEST_CASE("process_state finds a thread pinned to fewer CPUs, and a new thread, and restores them", "[runner]") {
  cpu_set_t every;
  CPU_ZERO(&every);
  REQUIRE(::sched_getaffinity(0, sizeof(every), &every) == 0);
  if (CPU_COUNT(&every) < 2) {
    BB_SKIP("this process may run on one CPU only: nothing to take away");
  }
  // Whatever fails below, this thread runs on every CPU again and the worker is joined.
  struct unpin {
    cpu_set_t cpus;
    ~unpin() { (void)::sched_setaffinity(0, sizeof(cpus), &cpus); }
  } unpinned{every};
  process_state state("cpu");
  CHECK(state.compare().global.empty());
  int first = 0;
  while (!CPU_ISSET(first, &every))
    ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);

  // This thread, as a kernel's call would pin the caller.
  REQUIRE(::sched_setaffinity(0, sizeof(one), &one) == 0);
  auto c = state.compare();
  CHECK(contains(c.global, "the CPUs thread " + std::to_string(::gettid()) + " may run on: "
                             + std::to_string(CPU_COUNT(&every)) + " CPUs ("));
  CHECK(contains(c.global, "the CPUs thread " + std::to_string(::gettid()) + " may run on: "));
  CHECK(c.global.size() == 1);
  CHECK(c.global.front().find("-> 1 CPU (" + std::to_string(first) + ")") != std::string::npos);
  state.restore();
  cpu_set_t now;
  CPU_ZERO(&now);
  REQUIRE(::sched_getaffinity(0, sizeof(now), &now) == 0);
  CHECK(CPU_EQUAL(&now, &every));
  CHECK(state.compare().global.empty());

  // A thread started since, pinned: held to what this thread could run on.
  std::atomic<bool> pinned{false}, done{false};
  std::atomic<long> tid{0};
  struct joined {
    std::thread t;
    std::atomic<bool>& done;
    ~joined() {
      done = true;
      if (t.joinable())
        t.join();
    }
  } worker{std::thread([&] {
             tid = ::gettid();
             (void)::sched_setaffinity(0, sizeof(one), &one);
             pinned = true;
             while (!done)
               std::this_thread::sleep_for(std::chrono::milliseconds(1));
           }),
           done};
  while (!pinned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(contains(state.compare().global, "the CPUs thread " + std::to_string(tid.load()) + " may run on: "));
  state.restore();
  CHECK(state.compare().global.empty());
  cpu_set_t worker_now;
  CPU_ZERO(&worker_now);
  REQUIRE(::sched_getaffinity(static_cast<pid_t>(tid.load()), sizeof(worker_now), &worker_now) == 0);
  CHECK(CPU_EQUAL(&worker_now, &every));
}

TEST_CASE("process_state reports and restores threads, grad mode and dispatch keys", "[runner]") {
  process_state state("cpu");
  auto none = state.compare();
  CHECK(none.global.empty());
  CHECK(none.dispatch.empty());

  auto threads = at::get_num_threads();
  at::set_num_threads(threads == 1 ? 2 : threads - 1);
  auto c = state.compare();
  CHECK(contains(c.global, "intra-op threads: " + std::to_string(threads) + " -> "));
  CHECK(c.dispatch.empty());
  state.restore();
  CHECK(at::get_num_threads() == threads);
  CHECK(state.compare().global.empty());

  bool grad = c10::GradMode::is_enabled();
  c10::GradMode::set_enabled(!grad);
  CHECK(contains(state.compare().global, "grad mode"));
  state.restore();
  CHECK(c10::GradMode::is_enabled() == grad);
  CHECK(state.compare().global.empty());

  {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::DispatchKey::AutogradCPU);
    CHECK_FALSE(state.compare().dispatch.empty());
    state.restore();
    CHECK(state.compare().dispatch.empty());
  }
  CHECK(state.compare().dispatch.empty());

  auto& ctx = at::globalContext();
  bool deterministic = ctx.deterministicAlgorithms();
  bool warn_only = ctx.deterministicAlgorithmsWarnOnly();
  ctx.setDeterministicAlgorithms(!deterministic, false);
  CHECK(contains(state.compare().global, "deterministic algorithms"));
  ctx.setDeterministicAlgorithms(deterministic, warn_only);
  CHECK(state.compare().global.empty());

  // What picks the reference's algorithms: oneDNN turned off for a CPU convolution, an
  // attention backend turned off.
  bool mkldnn = ctx.userEnabledMkldnn();
  ctx.setUserEnabledMkldnn(!mkldnn);
  CHECK(contains(state.compare().global, "mkldnn enabled: " + std::string(mkldnn ? "true" : "false")));
  state.restore();
  CHECK(ctx.userEnabledMkldnn() == mkldnn);
  bool math = ctx.userEnabledMathSDP();
  ctx.setSDPUseMath(!math);
  CHECK(contains(state.compare().global, "math attention enabled"));
  state.restore();
  CHECK(ctx.userEnabledMathSDP() == math);
  CHECK(state.compare().global.empty());

  // A limit lowered (the reference then fails where the kernel is never asked to run) is
  // seen; one raised is not.
  rlimit files{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &files) == 0);
  if (files.rlim_cur > 64) {
    auto lowered = files;
    lowered.rlim_cur = files.rlim_cur - 1;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
    CHECK(contains(state.compare().global, "open files limit: " + std::to_string(files.rlim_cur) + " -> "));
    state.restore();
    rlimit after{};
    ::getrlimit(RLIMIT_NOFILE, &after);
    CHECK(after.rlim_cur == files.rlim_cur);
    if (files.rlim_cur < files.rlim_max) {
      auto raised = files;
      raised.rlim_cur = files.rlim_cur + 1;
      REQUIRE(::setrlimit(RLIMIT_NOFILE, &raised) == 0);
      CHECK(state.compare().global.empty());
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
  }
  CHECK(state.compare().global.empty());
  // cuDNN's benchmark limit is no resource limit: raised, it is seen too.
  auto limit = ctx.benchmarkLimitCuDNN();
  ctx.setBenchmarkLimitCuDNN(limit + 1);
  CHECK(contains(state.compare().global, "cudnn benchmark limit: " + std::to_string(limit)));
  state.restore();
  CHECK(ctx.benchmarkLimitCuDNN() == limit);

  // A callback around every operator call: it could change a comparison's inputs.
  auto handle = at::addGlobalCallback(at::RecordFunctionCallback(
    [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> { return nullptr; }));
  CHECK(contains(state.compare().global, "operator callbacks"));
  at::removeCallback(handle);
  CHECK(state.compare().global.empty());
}

namespace {

// What a side's hooks saw, in order, with the measured calls' points.
struct hook_log {
  std::vector<std::string> events; // "before", "call", "after"
  std::vector<call_point> before, call, after;
};

bool same_point(const call_point& a, const call_point& b) {
  return a.round == b.round && a.index == b.index && a.checked == b.checked && a.timed == b.timed;
}

timed_side logged_side(hook_log& log, std::vector<std::string>& order, const char* name,
                       std::chrono::milliseconds pause) {
  timed_side s;
  s.before = [&log, pause](const call_point& p) {
    log.events.push_back("before");
    log.before.push_back(p);
    std::this_thread::sleep_for(pause);
  };
  s.call = [&log, &order, name](const call_point& p) {
    log.events.push_back("call");
    log.call.push_back(p);
    if (p.timed)
      order.push_back(std::string(name) + " " + std::to_string(p.round));
  };
  s.after = [&log, pause](const call_point& p) {
    log.events.push_back("after");
    log.after.push_back(p);
    std::this_thread::sleep_for(pause);
  };
  return s;
}

// cpu_bench with fixed counts (no budget): `warmup` calls, then `runs` timed in `rounds`.
runner_options fixed_counts(int64_t warmup, int64_t runs, int64_t rounds) {
  runner_options opts;
  opts.device = "cpu";
  opts.cpu_warmup = warmup;
  opts.cpu_runs = runs;
  opts.cpu_max_seconds = 0;
  opts.rounds = rounds;
  return opts;
}

} // namespace

TEST_CASE("time_pair runs each side's before and after hooks outside the measured calls",
          "[runner]") {
  auto opts = fixed_counts(3, 12, 4);
  hook_log ref, ker;
  std::vector<std::string> order;
  auto pause = std::chrono::milliseconds(5);
  std::vector<std::string> sides_told;
  auto t = time_pair(logged_side(ref, order, "reference", pause), logged_side(ker, order, "kernel", pause), opts,
                     nullptr, [&](code_side s) { sides_told.push_back(to_string(s)); });

  for (auto* log : {&ref, &ker}) {
    // Each call: before, the call, after, once each, with the same point.
    REQUIRE(log->events.size() == 3 * (3 + 12));
    for (size_t k = 0; k < log->events.size(); k += 3) {
      CHECK(log->events[k] == "before");
      CHECK(log->events[k + 1] == "call");
      CHECK(log->events[k + 2] == "after");
    }
    REQUIRE(log->call.size() == 15);
    for (size_t k = 0; k < log->call.size(); ++k) {
      CHECK(same_point(log->before[k], log->call[k]));
      CHECK(same_point(log->after[k], log->call[k]));
    }
    // Three warm-up calls, untimed, then 12 timed in 4 rounds of 3; checked_per_round calls of
    // each round, drawn at random, are checked.
    for (size_t k = 0; k < 3; ++k) {
      CHECK_FALSE(log->call[k].timed);
      CHECK_FALSE(log->call[k].checked);
    }
    std::map<int64_t, std::vector<call_point>> rounds;
    for (size_t k = 3; k < log->call.size(); ++k) {
      CHECK(log->call[k].timed);
      rounds[log->call[k].round].push_back(log->call[k]);
    }
    REQUIRE(rounds.size() == 4);
    for (auto& [r, points] : rounds) {
      REQUIRE(points.size() == 3);
      size_t checked = 0;
      for (size_t k = 0; k < points.size(); ++k) {
        CHECK(points[k].index == static_cast<int64_t>(k));
        checked += points[k].checked ? 1 : 0;
      }
      CHECK(checked == static_cast<size_t>(checked_per_round));
    }
  }
  // The hooks' 5 ms pauses are not in the measured times.
  CHECK(t.reference.mean_ms < 1.0);
  CHECK(t.kernel.mean_ms < 1.0);
  CHECK(t.reference.calls == 12);
  CHECK(t.kernel.calls == 12);
  CHECK(t.reference.round_means_ms.size() == 4);
  CHECK(t.kernel.round_means_ms.size() == 4);
  // Odd rounds time the kernel first.
  REQUIRE(order.size() == 24);
  CHECK(order.front() == "reference 0");
  CHECK(order[3] == "kernel 0");
  CHECK(order[6] == "kernel 1");
  CHECK(order[9] == "reference 1");
  CHECK(std::count(sides_told.begin(), sides_told.end(), "kernel") >= 4);

  // cpu_bench's budget includes the hooks: 5 ms pauses around each call leave room for about
  // 50 / 10 calls of a 50 ms budget, not 100.
  opts.cpu_max_seconds = 0.05;
  opts.cpu_runs = 100;
  opts.cpu_warmup = 10;
  opts.rounds = 2;
  hook_log ref2, ker2;
  auto budgeted = time_pair(logged_side(ref2, order, "reference", pause),
                            logged_side(ker2, order, "kernel", pause), opts);
  CHECK(budgeted.kernel.calls <= 5);
  CHECK(budgeted.kernel.calls >= 1);
  CHECK(ker2.before.size() == ker2.call.size());
  CHECK(ker2.after.size() == ker2.call.size());

  CHECK(pending_device_work_ms("cpu") == 0.0);
}

TEST_CASE("time_pair_synchronized on the CPU returns one mean per round and side", "[runner]") {
  auto opts = quick_options();
  hook_log ref, ker;
  std::vector<std::string> order;
  auto t = time_pair_synchronized(logged_side(ref, order, "reference", {}), logged_side(ker, order, "kernel", {}),
                                  opts, 6);
  CHECK(t.reference.round_means_ms.size() == 6);
  CHECK(t.kernel.round_means_ms.size() == 6);
  CHECK(ker.before.size() == ker.call.size());
  CHECK(ker.after.size() == ker.call.size());
  std::set<int64_t> last_rounds;
  for (auto& p : ker.call)
    if (p.timed && p.checked)
      last_rounds.insert(p.round);
  CHECK(last_rounds.size() == 6);
}

TEST_CASE("a cached reference time is calibrated now: a share of the calls in every round", "[runner]") {
  auto opts = fixed_counts(8, 20, 4);
  opts.reference_calibration = 0.25;
  // The cached figure says 50 ms; the reference takes about 2 ms a call now.
  side_timing cached{50.0, {50.0, 50.0, 50.0, 50.0}, 20};
  hook_log ref, ker;
  std::vector<std::string> order;
  auto slow = [](const call_point&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  timed_side ref_side = logged_side(ref, order, "reference", {}), ker_side = logged_side(ker, order, "kernel", {});
  auto ref_call = ref_side.call;
  ref_side.call = [&](const call_point& p) {
    ref_call(p);
    slow(p);
  };
  auto t = time_pair(ref_side, ker_side, opts, &cached);
  // The kernel's warm-up (8 calls: a colder reference would look slower) and a quarter of the
  // calls (5 of 20), spread over all 4 rounds, each alternating with the kernel's 5 calls as a
  // full timing does.
  size_t warm = 0;
  std::map<int64_t, int> per_round;
  for (auto& p : ref.call)
    p.timed ? ++per_round[p.round] : ++warm;
  CHECK(warm == 8);
  CHECK(per_round == std::map<int64_t, int>{{0, 2}, {1, 1}, {2, 1}, {3, 1}});
  CHECK(t.reference.calls == 5);
  CHECK(t.kernel.calls == 20);
  REQUIRE(order.size() == 25);
  CHECK(order[0] == "reference 0");
  CHECK(order[2] == "kernel 0");
  CHECK(order[7] == "kernel 1");
  CHECK(order[12] == "reference 1");
  // The figure is the one measured now, not the cached one, and the drift says how far apart.
  CHECK(t.reference_calibrated);
  CHECK(t.reference.mean_ms >= 2.0);
  CHECK(t.reference.mean_ms < 25.0);
  CHECK(t.reference_drift == Approx(t.reference.mean_ms / 50.0 - 1.0));
  CHECK(t.reference.round_means_ms.size() == 4);
  CHECK(t.estimate.speedup == Approx(t.reference.mean_ms / t.kernel.mean_ms));

  // A share of 1 times the reference in full; without a cached figure, nothing is calibrated.
  opts.reference_calibration = 1.0;
  hook_log ref2, ker2;
  auto full = time_pair(logged_side(ref2, order, "reference", {}), logged_side(ker2, order, "kernel", {}), opts, &cached);
  CHECK(full.reference.calls == 20);
  CHECK(full.reference_calibrated);
  hook_log ref3, ker3;
  auto fresh = time_pair(logged_side(ref3, order, "reference", {}), logged_side(ker3, order, "kernel", {}), opts);
  CHECK(fresh.reference.calls == 20);
  CHECK_FALSE(fresh.reference_calibrated);
  CHECK(fresh.reference_drift == 0.0);

  // Fewer calls than rounds in a full timing: the calibration still makes one a round.
  opts.cpu_runs = 3;
  opts.rounds = 5;
  opts.reference_calibration = 0.1;
  hook_log ref4, ker4;
  auto few = time_pair(logged_side(ref4, order, "reference", {}), logged_side(ker4, order, "kernel", {}), opts, &cached);
  CHECK(few.reference.calls == 3);
  CHECK(few.reference.round_means_ms.size() == 3);
  CHECK(few.kernel.round_means_ms.size() == 3);
}

TEST_CASE("drop_preempted leaves out preempted calls, at most a fifth of a side's, one call a round kept",
          "[runner]") {
  using rounds_t = std::vector<std::vector<double>>;
  using marks_t = std::vector<std::vector<bool>>;
  // Two of ten preempted: left out.
  rounds_t r = {{1, 9, 1, 1, 1}, {1, 1, 9, 1, 1}};
  drop_preempted(r, marks_t{{false, true, false, false, false}, {false, false, true, false, false}});
  CHECK(r == rounds_t{{1, 1, 1, 1}, {1, 1, 1, 1}});
  // Three of ten: over a fifth, so none is (a kernel preempting its own calls gains nothing).
  rounds_t over = {{1, 9, 9, 1, 1}, {1, 1, 9, 1, 1}};
  auto before = over;
  drop_preempted(over, marks_t{{false, true, true, false, false}, {false, false, true, false, false}});
  CHECK(over == before);
  // A round whose every call was preempted keeps them: every round has a mean.
  rounds_t whole = {{9}, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
  drop_preempted(whole, marks_t{{true}, {false, false, false, false, false, false, false, false, false}});
  CHECK(whole == rounds_t{{9}, {1, 1, 1, 1, 1, 1, 1, 1, 1}});
  // Nothing preempted: nothing changes.
  rounds_t none = {{1, 2}, {3, 4}};
  drop_preempted(none, marks_t{{false, false}, {false, false}});
  CHECK(none == rounds_t{{1, 2}, {3, 4}});
}

TEST_CASE("the stricter CPU timer makes every call once, checked or not", "[runner]") {
  auto opts = quick_options();
  opts.cpu_runs = 10;
  std::vector<std::string> order;
  hook_log ref, ker;
  time_pair_synchronized(logged_side(ref, order, "reference", {}), logged_side(ker, order, "kernel", {}), opts, 2);
  for (auto* log : {&ref, &ker}) {
    std::set<std::pair<int64_t, int64_t>> points;
    size_t timed = 0;
    for (auto& p : log->call)
      if (p.timed) {
        ++timed;
        points.insert({p.round, p.index});
      }
    CHECK(timed == 20);
    CHECK(points.size() == timed);
  }
}

TEST_CASE("aten against itself is correct and unflagged with or without the exploit checks",
          "[runner]") {
  for (bool checks : {true, false}) {
    auto opts = quick_options();
    opts.exploit_checks = checks;
    auto r = evaluate_job(aten_job("aten.relu.default", {"((T([64, 64], f32),), {})"}), opts, [](const step&) {});
    INFO("exploit_checks " << checks << ": " << r.detail);
    CHECK(r.outcome == bb::outcome::ok);
    CHECK(r.flags.empty());
    REQUIRE(r.correctness.size() == 1);
    INFO(r.correctness[0].error_msg);
    CHECK(r.correctness[0].is_correct);
    REQUIRE(r.performance.size() == 1);
    INFO(r.performance[0].error_msg);
    CHECK(r.performance[0].successfully_ran);
    CHECK(r.performance[0].timer == "cpu_bench");
  }
}

TEST_CASE("aten against itself with the exploit checks on times 1.00 on a CPU: no side pays for the checks",
          "[runner]") {
  // relu of 1024x1024 f32 (the smoke suite): 0.2 ms a call, of which a timed call whose output
  // came from fresh pages (a copy kept by one side only, the heap given back to the system)
  // once paid 1 ms. That made aten 0.66x against itself.
  auto opts = quick_options();
  opts.cpu_warmup = 10;
  opts.cpu_runs = 100;
  opts.cpu_max_seconds = 5.0;
  opts.cpu_threads = 1;
  opts.exploit_checks = true;
  int threads = at::get_num_threads();
  apply_options(opts);
  // The median of five: one run that a busy CI machine preempts (a neighbour test's burst
  // reached 1.16x) moves it little, a bias of either side moves every run.
  std::vector<double> speedups;
  for (int i = 0; i < 5; ++i) {
    auto r = evaluate_job(aten_job("aten.relu.default", {"((T([1024, 1024], f32),), {})"}), opts,
                          [](const step&) {});
    REQUIRE(r.performance.size() == 1);
    INFO(r.performance[0].error_msg);
    REQUIRE(r.performance[0].successfully_ran);
    speedups.push_back(r.performance[0].speedup);
  }
  at::set_num_threads(threads);
  std::sort(speedups.begin(), speedups.end());
  INFO("speedups " << speedups[0] << ", " << speedups[1] << ", " << speedups[2] << ", " << speedups[3] << ", "
                   << speedups[4]);
  CHECK(speedups[2] > 0.87);
  CHECK(speedups[2] < 1.15);
}

TEST_CASE("aten against itself passes its extra inputs (signed and special values)", "[runner]") {
  std::vector<std::pair<std::string, std::string>> jobs = {
    {"aten.relu.default", "((T([64], f32),), {})"},
    {"aten.add.Tensor", "((T([8, 8], f32), T([8], f32)), {})"},
    {"aten.sigmoid.default", "((T([33], f16),), {})"},
    {"aten.floor.default", "((T([20], f32),), {})"},
  };
  for (auto& [op, input] : jobs) {
    auto opts = quick_options();
    opts.extra_inputs = true;
    auto job = aten_job(op, {input});
    job.performance_inputs.clear();
    std::vector<std::string> texts;
    auto r = evaluate_job(job, opts, [&](const step& s) { texts.push_back(s.text); });
    INFO(op << ": " << r.detail);
    CHECK(r.outcome == bb::outcome::ok);
    CHECK(r.flags.empty());
    REQUIRE(r.correctness.size() == 1);
    INFO(r.correctness[0].error_msg);
    CHECK(r.correctness[0].is_correct);
    // Both variants were run.
    for (auto* name : {"extra input 'signed values'", "extra input 'special values'"})
      CHECK(std::any_of(texts.begin(), texts.end(),
                        [&](const std::string& t) { return t.find(name) != std::string::npos; }));
  }
}

TEST_CASE("poison_free_device_memory fills the CUDA allocator's free blocks with NaN", "[gpu]") {
  if (!built_with_cuda() || !at::hasCUDA()) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  auto cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  {
    auto zeros = at::zeros({1 << 20}, cuda); // freed into the allocator's cache, still zeros
  }
  synchronize("cuda");
  poison_free_device_memory("cuda");
  synchronize("cuda");
  auto reused = at::empty({1 << 20}, cuda);
  CHECK(at::isnan(reused).all().item<bool>());
  poison_free_device_memory("cpu"); // nothing on a CPU
  {
    // A free block of 64 MiB poisoned in its first 8 MiB only: what an allocation of 8 MiB
    // takes of it, split from its start.
    auto zeros = at::zeros({16 << 20}, cuda);
  }
  synchronize("cuda");
  poison_free_device_memory("cuda", size_t(8) << 20);
  synchronize("cuda");
  auto head = at::empty({2 << 20}, cuda);
  CHECK(at::isnan(head).all().item<bool>());

  // do_bench with hooks: each call has its before and after, and each round one checked call.
  runner_options opts;
  opts.device = "cuda";
  opts.gpu_warmup_ms = 1;
  opts.gpu_rep_ms = 5;
  opts.flush_bytes = 1 << 20;
  opts.rounds = 3;
  auto x = at::rand({1024}, cuda);
  hook_log ref, ker;
  std::vector<std::string> order;
  auto side = [&](hook_log& log, const char* name) {
    auto s = logged_side(log, order, name, {});
    auto log_call = s.call;
    s.call = [log_call, x](const call_point& p) {
      log_call(p);
      (void)at::relu(x);
    };
    return s;
  };
  auto t = time_pair(side(ref, "reference"), side(ker, "kernel"), opts);
  CHECK(ker.before.size() == ker.call.size());
  CHECK(ker.after.size() == ker.call.size());
  CHECK(t.kernel.round_means_ms.size() == 3);
  std::set<int64_t> last_rounds;
  int64_t timed = 0;
  for (auto& p : ker.call) {
    timed += p.timed ? 1 : 0;
    if (p.timed && p.checked)
      last_rounds.insert(p.round);
  }
  CHECK(timed == t.kernel.calls);
  CHECK(last_rounds.size() == 3);
}

// A kernel registered over aten's under aten's own file and line, and warm-up calls whose
// values a timed call would see again: both got past the first version of the guards.

TEST_CASE("dispatcher_fingerprint sees a replacement registered under the original's name",
          "[runner]") {
  // The computed table shows a kernel by its debug string ("registered at FILE:LINE"), which
  // a registration chooses: torch.library.Library takes it from the Python frame's file and
  // line, torch::Library from its arguments.
  auto relu = c10::Dispatcher::singleton().findSchemaOrThrow("aten::relu", "");
  std::string table = relu.dumpComputedTable(), file;
  uint32_t line = 0;
  auto at = table.find("CPU: registered at ");
  REQUIRE(at != std::string::npos);
  auto from = at + std::string("CPU: registered at ").size();
  auto end = table.find(" [", from);
  auto colon = table.rfind(':', end);
  file = table.substr(from, colon - from);
  line = static_cast<uint32_t>(std::stoul(table.substr(colon + 1, end - colon - 1)));
  auto fp = dispatcher_fingerprint().with(relu);
  torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, file.c_str(), line);
  lib.impl("relu", [](const at::Tensor& t) { return t.clone(); });
  CHECK(at::relu(at::tensor({-1.0f})).item<float>() == -1.0f); // replaced
  CHECK(fp.changed() == std::vector<std::string>{"aten::relu"});
}

TEST_CASE("no timed call sees the values of a warm-up call (evaluate.cpp's call seeds)", "[runner]") {
  // The seed each call's inputs are refilled from, as evaluate.cpp's time_input computes it.
  auto seed_of = [](const call_point& p) {
    return call_seed(42, 0, p.round, p.index, p.timed, p.rank);
  };
  runner_options opts;
  opts.cpu_warmup = 3;
  opts.cpu_runs = 12;
  opts.cpu_max_seconds = 0;
  opts.rounds = 4;
  std::set<uint64_t> warmup, timed;
  timed_side side;
  side.before = [&](const call_point& p) { (p.timed ? timed : warmup).insert(seed_of(p)); };
  side.call = [](const call_point&) {};
  time_pair(side, side, opts);
  std::vector<uint64_t> both;
  std::set_intersection(warmup.begin(), warmup.end(), timed.begin(), timed.end(), std::back_inserter(both));
  CHECK(both.empty());
}

TEST_CASE("refresh_floats reorders the integers of a call that has no floating-point tensor",
          "[runner]") {
  built_call call;
  auto ints = at::arange(64, at::kLong);
  auto mask = at::arange(64, at::kLong).remainder(3).eq(0);
  call.args = {ints, mask};
  auto before_ints = ints.clone();
  auto before_mask = mask.clone();
  refresh_floats(call, 11, at::kCPU);
  // Other orders, the same values: an index stays an index the operator took.
  CHECK_FALSE(at::equal(ints, before_ints));
  CHECK(at::equal(std::get<0>(ints.sort()), before_ints));
  CHECK(mask.sum().item<int64_t>() == before_mask.sum().item<int64_t>());
  // Deterministic for a seed.
  built_call again;
  auto ints2 = before_ints.clone();
  again.args = {ints2, before_mask.clone()};
  refresh_floats(again, 11, at::kCPU);
  CHECK(at::equal(ints2, ints));
  // With a floating-point tensor beside them, integers keep their order.
  built_call mixed;
  auto idx = before_ints.clone();
  mixed.args = {at::zeros({8}), idx};
  refresh_floats(mixed, 11, at::kCPU);
  CHECK(at::equal(idx, before_ints));
}

namespace {

// A refresher refreshed again and again gives what refresh_floats gives, seed after seed, on
// the same buffers.
void check_refresher_matches(const at::Device& device) {
  auto make = [&] {
    built_call floats, ints;
    floats.args = {at::zeros({1000}, at::TensorOptions().device(device)),
                   at::zeros({7, 3}, at::TensorOptions().dtype(at::kHalf).device(device)),
                   at::arange(5, at::TensorOptions().dtype(at::kLong).device(device))};
    ints.args = {at::arange(300, at::TensorOptions().dtype(at::kLong).device(device))};
    return std::make_pair(floats, ints);
  };
  auto [floats, ints] = make();
  auto [floats1, ints1] = make();
  input_refresher f(floats, device), i(ints, device);
  for (uint64_t seed : {3u, 4u, 3u, 99u}) {
    f.refresh(seed);
    i.refresh(seed); // integers are reordered from their order before
    refresh_floats(floats1, seed, device);
    refresh_floats(ints1, seed, device);
    for (size_t k = 0; k < floats.args.size(); ++k)
      CHECK(at::equal(floats.args[k].toTensor(), floats1.args[k].toTensor()));
    CHECK(at::equal(ints.args[0].toTensor(), ints1.args[0].toTensor()));
    CHECK_FALSE(at::equal(ints.args[0].toTensor(), at::arange(300, ints.args[0].toTensor().options())));
  }
}

} // namespace

TEST_CASE("input_refresher gives refresh_floats' values, seed after seed", "[runner]") {
  check_refresher_matches(at::kCPU);
}

TEST_CASE("input_refresher refills the storage a tensor was moved to, not the one it left",
          "[runner]") {
  // A kernel that points its input at memory of its own (set_), or grows it (resize_), so
  // that the refills go where the next call never reads and a replay goes unseen.
  built_call call;
  auto x = at::full({16}, -1.0f);
  call.args = {x};
  input_refresher r(call, at::kCPU);
  r.refresh(1);
  CHECK(all_true(x.ge(0.0f)));
  auto left = x.storage();
  auto kept = at::full({16}, -2.0f);
  x.set_(kept);
  r.refresh(2);
  CHECK(all_true(kept.ge(0.0f)));
  auto before = at::from_blob(left.mutable_data(), {16}).clone();
  r.refresh(3);
  CHECK(at::equal(at::from_blob(left.mutable_data(), {16}), before)); // no longer refilled
  x.resize_({64});
  x.fill_(-3.0f);
  r.refresh(4);
  CHECK(all_true(x.ge(0.0f)));
  // A float tensor with nothing to refill still draws its stream: refresh_floats' values.
  built_call with_empty, with_empty2;
  with_empty.args = {at::empty({0}), at::zeros({8})};
  with_empty2.args = {at::empty({0}), at::zeros({8})};
  built_call alone;
  alone.args = {at::zeros({8})};
  input_refresher(with_empty, at::kCPU).refresh(5);
  refresh_floats(with_empty2, 5, at::kCPU);
  refresh_floats(alone, 5, at::kCPU);
  CHECK(at::equal(with_empty.args[1].toTensor(), with_empty2.args[1].toTensor()));
  CHECK_FALSE(at::equal(with_empty.args[1].toTensor(), alone.args[0].toTensor()));
}

TEST_CASE("input_refresher gives refresh_floats' values on CUDA, seed after seed", "[gpu]") {
  if (!at::hasCUDA()) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  check_refresher_matches(at::Device(at::kCUDA, 0));
}

TEST_CASE("the checked calls of a round are drawn anew each time, one a round", "[runner]") {
  runner_options opts;
  opts.cpu_warmup = 1;
  opts.cpu_runs = 40;
  opts.cpu_max_seconds = 0;
  opts.rounds = 4;
  std::set<std::pair<int64_t, int64_t>> seen; // (round, index) checked, over several timings
  for (int run = 0; run < 5; ++run) {
    std::map<int64_t, int> per_round;
    timed_side side;
    side.call = [&](const call_point& p) {
      if (p.timed && p.checked) {
        ++per_round[p.round];
        CHECK(p.rank == 0);
        seen.insert({p.round, p.index});
      } else {
        CHECK(p.rank == -1);
      }
    };
    time_pair(side, side, opts);
    REQUIRE(per_round.size() == 4);
    for (auto& [round, n] : per_round)
      CHECK(n == 2 * checked_per_round); // both sides (the same side twice here)
  }
  // Not the same calls every time: a kernel cannot learn which are checked.
  CHECK(seen.size() > 8);
}


TEST_CASE("the code guard watches the clocks and bbrunner's code, and finds nothing in honest timing",
          "[runner]") {
  code_baseline();
  auto watched = code_watched();
  std::string names;
  for (auto& w : watched)
    names += w + " ";
  INFO(names);
  CHECK(std::find(watched.begin(), watched.end(), "clock_gettime") != watched.end());
  CHECK(std::find(watched.begin(), watched.end(), "_ZNSt6chrono3_V212steady_clock3nowEv") != watched.end());
  CHECK(std::find(watched.begin(), watched.end(), "bbrunner's own code") != watched.end());
  // Honest timing of aten against itself reads the clocks many times, each checked.
  auto x = at::rand({256});
  (void)time_ms([&] { (void)at::relu(x); }, fixed_counts(2, 50, 5));
  check_all_code();
  CHECK(code_finding().empty());
  // Checked after every clock reading: cheap beside a call.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i)
    check_timing_code();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / 1000;
  WARN("check_timing_code: " << us << " us a check, " << watched.size() << " watched");
  CHECK(us < 50);
}

namespace {
std::chrono::steady_clock::time_point stopped_clock() noexcept {
  return std::chrono::steady_clock::time_point{};
}
} // namespace

TEST_CASE("the code guard finds the program's GOT entry for its clock redirected", "[runner]") {
  (void)std::chrono::steady_clock::now(); // bound, if the loader binds lazily
  code_baseline();
  // The program's clock as it calls it through its GOT: libstdc++'s steady_clock::now, or,
  // where a toolchain builds that into the program (as on the GPU machine), the C library's
  // clock_gettime it calls.
  auto watched = code_watched();
  Dl_info program{}, steady{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(&stopped_clock), &program) != 0);
  void* now = ::dlsym(RTLD_DEFAULT, "_ZNSt6chrono3_V212steady_clock3nowEv");
  REQUIRE(now != nullptr);
  REQUIRE(::dladdr(now, &steady) != 0);
  std::string clock = steady.dli_fbase == program.dli_fbase ? "clock_gettime" : "_ZNSt6chrono3_V212steady_clock3nowEv";
  INFO(clock << "; " << watched.size() << " watched");
  REQUIRE(std::find(watched.begin(), watched.end(), clock + "'s GOT entry in bb_runner_tests") != watched.end());
  // Found as a kernel would find it: the bound address in the program's writable data.
  void* bound = ::dlsym(RTLD_DEFAULT, clock.c_str());
  REQUIRE(bound != nullptr);
  char exe[4096];
  auto n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  std::string self(exe, static_cast<size_t>(n));
  std::vector<void**> slots;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    // Read-only once relocated: linked with -z now and relro, as bbrunner is.
    if (line.size() < self.size() || line.compare(line.size() - self.size(), self.size(), self) != 0
        || line.find(" r") == std::string::npos)
      continue;
    auto dash = line.find('-');
    auto start = std::stoull(line.substr(0, dash), nullptr, 16);
    auto end = std::stoull(line.substr(dash + 1), nullptr, 16);
    for (auto p = start; p + sizeof(void*) <= end; p += sizeof(void*))
      if (*reinterpret_cast<void**>(p) == bound)
        slots.push_back(reinterpret_cast<void**>(p));
  }
  REQUIRE(!slots.empty());
  CHECK(code_finding().empty());
  // Redirected in a child of this process: a finding is kept for the process's life.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (auto* slot : slots) {
      auto at = reinterpret_cast<uintptr_t>(slot) & ~(page - 1);
      ::mprotect(reinterpret_cast<void*>(at), page, PROT_READ | PROT_WRITE);
      *slot = reinterpret_cast<void*>(&stopped_clock);
    }
    check_timing_code();
    auto finding = code_finding();
    ::_exit(finding.find(clock + "'s GOT entry in") == 0
                && finding.find("was redirected") != std::string::npos
              ? 0
              : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(code_finding().empty());
}
