#include "runner/runner.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "runner/compare.hpp"
#include "runner/honesty.hpp"
#include "runner/inputs.hpp"
#include "runner/kernel.hpp"
#include "runner/native_kernel.hpp"
#include "runner/opinfo.hpp"
#include "runner/python_kernel.hpp"
#include "runner/timing.hpp"
#include "suite/args.hpp"
#include "suite/ops.hpp"

namespace bb::runner {

namespace {

using clock = std::chrono::steady_clock;

// A failure of one call, as the record fields want it.
struct call_error {
  std::string type;
  std::string message;
  std::string traceback;
};

bool contains(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

// Errors that say the CUDA context is gone, and allocation failures, whatever raised them.
std::string classify(const std::string& type, const std::string& message) {
  if (contains(message, "CUDA error") || contains(message, "cudaError")
      || contains(message, "illegal memory access") || contains(message, "device-side assert")
      || contains(message, "CUDA driver error"))
    return "cuda_error";
  if (type == "OutOfMemoryError" || type == "MemoryError" || contains(message, "out of memory")
      || contains(message, "not enough memory") || contains(message, "can't allocate memory"))
    return "oom";
  return type;
}

// An exception in the runner's own code (building, comparing, checking): never the kernel's.
struct own_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs kernel or reference code: what it throws is that call's error. The runner's own
// failures pass through.
template <class F>
std::optional<call_error> guarded(F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (const own_failure&) {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return call_error{"oom", e.what_without_backtrace(), e.what()};
  } catch (const python_error& e) {
    return call_error{classify(e.type, e.what()), e.what(), e.traceback};
  } catch (const c10::Error& e) {
    return call_error{classify("exception", e.what_without_backtrace()), e.what_without_backtrace(),
                      e.what()};
  } catch (const std::bad_alloc& e) {
    return call_error{"oom", e.what(), ""};
  } catch (const std::exception& e) {
    return call_error{classify("exception", e.what()), e.what(), ""};
  }
}

// Runs the runner's own code: an exception there becomes own_failure (the job's infra_error),
// except a lost CUDA context, which a kernel may have caused and which ends the runner.
template <class F>
auto own(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const own_failure&) {
    throw;
  } catch (const c10::Error& e) {
    if (classify("", e.what_without_backtrace()) == "cuda_error")
      throw;
    throw own_failure(std::string("bbrunner failed while ") + what + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw own_failure(std::string("bbrunner failed while ") + what + ": " + e.what());
  }
}

// Seconds per phase of the job (docs/architecture.md, "Profile").
struct phase_clock {
  std::map<std::string, double> seconds;
  template <class F>
  auto time(const char* phase, F&& f) -> decltype(f()) {
    auto start = clock::now();
    struct add {
      phase_clock& pc;
      const char* phase;
      clock::time_point start;
      ~add() {
        pc.seconds[phase] += std::chrono::duration<double>(clock::now() - start).count();
      }
    } guard{*this, phase, start};
    return f();
  }
};

// What is known of one input text within a job: the built call (shared by its correctness
// and performance checks), and the verdict of running reference and kernel on it.
struct input_state {
  std::optional<built_call> call;
  call_error build_error;
  bool checked = false;
  std::optional<call_error> run_error;
  comparison verdict;
};

struct op_context {
  const eval_job& job;
  const runner_options& opts;
  const progress_fn& progress;
  c10::OperatorHandle op;
  at::Device device;
  const kernel& reference;
  const kernel& impl;
  /// Honesty flags raised so far (each fails its input).
  std::vector<std::string>& flags;
  phase_clock& phases;
  std::map<std::string, input_state> inputs;
};

void raise_flag(op_context& ctx, const std::string& flag) {
  if (std::find(ctx.flags.begin(), ctx.flags.end(), flag) == ctx.flags.end())
    ctx.flags.push_back(flag);
}

void tell(op_context& ctx, std::string text, const std::string& side, const std::string& kind,
          size_t index) {
  step s;
  s.text = std::move(text);
  // With the aten backend the kernel is the reference: whatever it does is the reference's.
  s.side = side == "kernel" && ctx.job.kernel.kind == "aten" ? "reference" : side;
  s.input_kind = kind;
  s.input_index = static_cast<uint32_t>(index);
  ctx.progress(s);
}

input_state& input(op_context& ctx, const std::string& text, const std::string& label,
                   const std::string& kind, size_t index) {
  auto& st = ctx.inputs[text];
  if (st.call || !st.build_error.type.empty())
    return st;
  tell(ctx, label + ": building inputs", "", kind, index);
  if (is_opinfo_sample(text)) {
    // An OpInfo sample: rebuilt in the embedded Python from its description and seed.
    if (auto failure = ctx.phases.time("build_inputs", [&] {
          return guarded([&] { st.call = build_opinfo_sample(text, ctx.op.schema(), ctx.device); });
        })) {
      st.build_error = *failure;
      if (st.build_error.type != "cuda_error")
        st.build_error.type = "reference_error";
    }
    return st;
  }
  auto parsed = args::parse_call(text);
  if (auto* e = std::get_if<args::parse_error>(&parsed)) {
    st.build_error = {"bad_input", "cannot parse input: " + args::to_string(*e), ""};
    return st;
  }
  if (auto failure = ctx.phases.time("build_inputs", [&] {
        return guarded([&] {
          st.call = build_call(std::get<args::call>(parsed), ctx.op.schema(),
                               input_seed(ctx.job.op_name, text), ctx.device);
          synchronize(ctx.opts.device);
        });
      })) {
    st.build_error = *failure;
    if (st.build_error.type != "cuda_error")
      st.build_error.type =
        failure->message.rfind("unsupported", 0) == 0 ? "unsupported" : "reference_error";
  }
  return st;
}

// One call of `k` on a fresh clone of `call`, timed as `phase`: what it threw, if anything.
std::optional<call_error> run_one_call(op_context& ctx, const char* phase, const kernel& k,
                                    const built_call& call, prepared_input& in, c10::IValue& out) {
  return ctx.phases.time(phase, [&] {
    return guarded([&] {
      in = prepare(call, ctx.op.schema(), &k);
      out = k.call(in);
      synchronize(ctx.opts.device);
    });
  });
}

// Runs the reference and the kernel once each on fresh clones, compares their results and
// checks the kernel's honesty against what the reference itself did on the same input.
void check(op_context& ctx, input_state& st, const std::string& label, const std::string& kind,
           size_t index) {
  if (st.checked)
    return;
  st.checked = true;
  const auto& schema = ctx.op.schema();
  tell(ctx, label + ": reference", "reference", kind, index);
  prepared_input ref_in;
  c10::IValue ref, res;
  // An input the operator cannot take is the reference's failure.
  if (auto e = run_one_call(ctx, "reference_calls", ctx.reference, *st.call, ref_in, ref)) {
    if (e->type != "cuda_error")
      e->type = "reference_error";
    st.run_error = e;
    return;
  }
  tell(ctx, label + ": kernel", "kernel", kind, index);
  prepared_input in;
  if (auto e = run_one_call(ctx, "kernel_calls", ctx.impl, *st.call, in, res)) {
    st.run_error = e;
    return;
  }
  tell(ctx, label + ": checking", "", kind, index);
  auto honesty = ctx.phases.time("honesty", [&] {
    return own("checking the kernel's honesty", [&] {
      auto mutated = beyond_reference(changed_inputs(*st.call, in, schema, ctx.impl.takes_call_args()),
                                      changed_inputs(*st.call, ref_in, schema, false));
      auto aliased = beyond_reference(aliased_inputs(res, in, schema, ctx.impl.takes_call_args()),
                                      aliased_inputs(ref, ref_in, schema, false));
      return std::make_pair(mutated, aliased);
    });
  });
  if (!honesty.first.empty()) {
    raise_flag(ctx, "mutates_input");
    st.run_error = call_error{"mutates_input", "the kernel changed an input the operator does not: "
                                                 + honesty.first.front(), ""};
    return;
  }
  if (!honesty.second.empty()) {
    raise_flag(ctx, "aliases_input");
    st.run_error = call_error{"aliases_input", "the kernel's result shares memory with an input where "
                                                 "the operator's does not: " + honesty.second.front(), ""};
    return;
  }
  st.verdict = ctx.phases.time("compare", [&] {
    return own("comparing the results", [&] { return compare(ref, res, ctx.opts.atol, ctx.opts.rtol); });
  });
  if (st.verdict.ok)
    return;
  // Before the kernel is blamed: does the reference agree with itself? Some of aten's kernels
  // leave part of an output unwritten on some devices and dtypes; such an input says nothing
  // about the kernel and is left out.
  tell(ctx, label + ": reference again", "reference", kind, index);
  prepared_input again_in;
  c10::IValue again;
  if (run_one_call(ctx, "reference_calls", ctx.reference, *st.call, again_in, again))
    return;
  auto self_check = ctx.phases.time("compare", [&] {
    return own("comparing the reference with itself", [&] { return compare(ref, again, ctx.opts.atol, ctx.opts.rtol); });
  });
  if (!self_check.ok)
    st.run_error = call_error{"reference_error",
                              "the reference does not agree with itself on this input: " + self_check.message, ""};
}

template <class T, class P>
const T* find_in(const std::vector<T>& xs, P pred) {
  auto it = std::find_if(xs.begin(), xs.end(), pred);
  return it == xs.end() ? nullptr : &*it;
}

const input_failure* left_out(const eval_job& job, const std::string& kind, size_t index) {
  return find_in(job.reference_failures,
                 [&](const input_failure& f) { return f.kind == kind && f.index == index; });
}

// "correctness input 7/10": numbered among the operator's inputs, so that a shard's messages
// (a crash's detail among them) read as an unsharded job's.
std::string input_label(const eval_job& job, const std::string& kind, size_t i, size_t n) {
  const auto& s = job.shard;
  bool correctness = kind == "correctness";
  if (s.is_part()) {
    i += correctness ? s.correctness_begin : s.performance_begin;
    n = correctness ? s.correctness_total : s.performance_total;
  }
  return kind + " input " + std::to_string(i + 1) + "/" + std::to_string(n);
}

correctness_record check_input(op_context& ctx, const std::string& text, size_t i, size_t n) {
  correctness_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  if (auto f = left_out(ctx.job, "correctness", i)) {
    rec.error_type = "reference_error";
    rec.error_msg = f->message;
    return rec;
  }
  auto label = input_label(ctx.job, "correctness", i, n);
  auto& st = input(ctx, text, label, "correctness", i);
  call_error err = st.build_error;
  if (st.call) {
    check(ctx, st, label, "correctness", i);
    if (st.run_error)
      err = *st.run_error;
  }
  if (!err.type.empty()) {
    rec.error_type = err.type;
    rec.error_msg = err.message;
    rec.traceback = err.traceback;
    return rec;
  }
  rec.is_correct = st.verdict.ok;
  rec.max_abs_error = st.verdict.max_abs_error;
  rec.max_rel_error = st.verdict.max_rel_error;
  if (!st.verdict.ok) {
    rec.error_type = "incorrect";
    rec.error_msg = st.verdict.message;
  }
  return rec;
}

const cached_reference* cached_for(const eval_job& job, size_t index) {
  return find_in(job.cached_references, [&](const cached_reference& c) { return c.index == index; });
}

performance_record time_input(op_context& ctx, const std::string& text, size_t i, size_t n) {
  performance_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  rec.speedup = 1.0;
  if (auto f = left_out(ctx.job, "performance", i)) {
    rec.error_msg = "reference_error: " + f->message;
    return rec;
  }
  auto label = input_label(ctx.job, "performance", i, n);
  auto& st = input(ctx, text, label, "performance", i);
  if (!st.call) {
    rec.error_msg = st.build_error.type + ": " + st.build_error.message;
    return rec;
  }
  // As BackendBench, only a kernel that is correct on this input is timed; the same input's
  // correctness check is not repeated.
  check(ctx, st, label, "performance", i);
  if (st.run_error) {
    rec.error_msg = st.run_error->type + ": " + st.run_error->message;
    return rec;
  }
  if (!st.verdict.ok) {
    rec.error_msg = "incorrect: " + st.verdict.message;
    return rec;
  }
  // As BackendBench, inputs are reused call after call. Two sets of buffers: the reference
  // uses one and the kernel the other, swapped every round, so that where a buffer lies in
  // memory favours neither side.
  const auto& schema = ctx.op.schema();
  prepared_input ref_in[2], in[2];
  own("preparing the timed inputs", [&] {
    auto a = clone_call(*st.call);
    auto b = clone_call(*st.call);
    ref_in[0] = prepare_shared(a, schema, &ctx.reference);
    in[0] = prepare_shared(b, schema, &ctx.impl);
    ref_in[1] = prepare_shared(b, schema, &ctx.reference);
    in[1] = prepare_shared(a, schema, &ctx.impl);
  });
  side_timing cached;
  auto hit = cached_for(ctx.job, i);
  if (hit) {
    cached.mean_ms = hit->mean_ms;
    cached.round_means_ms = hit->round_means_ms;
  }
  tell(ctx, label + ": timing", "", "performance", i);
  paired_timing timing;
  auto start = clock::now();
  // Each side's calls are announced, so that a crash or a hang is blamed on the side that had
  // it (on a GPU, calls are queued: a fault shows at the synchronization, told as neither).
  std::string last_side;
  auto on_side = [&](const char* side) {
    if (last_side == side)
      return;
    last_side = side;
    tell(ctx, label + (last_side.empty() ? ": timing" : ": timing the " + last_side), last_side,
         "performance", i);
  };
  auto failure = guarded([&] {
    timing = time_pair([&](int64_t round) { ctx.reference.call(ref_in[round % 2]); },
                       [&](int64_t round) { ctx.impl.call(in[round % 2]); }, ctx.opts,
                       hit ? &cached : nullptr, on_side);
  });
  // The timer's wall time, split between the sides by the time their calls took.
  double wall = std::chrono::duration<double>(clock::now() - start).count();
  double ref_share = hit ? 0.0 : timing.reference.mean_ms * static_cast<double>(timing.reference.calls);
  double ker_share = timing.kernel.mean_ms * static_cast<double>(timing.kernel.calls);
  double ref_part = ref_share + ker_share > 0 ? wall * ref_share / (ref_share + ker_share) : 0.0;
  ctx.phases.seconds["time_reference"] += ref_part;
  ctx.phases.seconds["time_kernel"] += wall - ref_part;
  if (failure) {
    rec.error_msg = failure->type + ": " + failure->message;
    return rec;
  }
  rec.reference_time_ms = timing.reference.mean_ms;
  rec.benchmark_time_ms = timing.kernel.mean_ms;
  rec.successfully_ran = true;
  rec.speedup = timing.estimate.speedup;
  rec.speedup_ci_low = timing.estimate.ci_low;
  rec.speedup_ci_high = timing.estimate.ci_high;
  rec.timing_rounds = static_cast<uint32_t>(
    std::min(timing.reference.round_means_ms.size(), timing.kernel.round_means_ms.size()));
  rec.reference_cached = hit != nullptr;
  if (!hit)
    rec.reference_round_means_ms = timing.reference.round_means_ms;
  return rec;
}

void fail_every_input(eval_result& r, const eval_job& job, const call_error& why) {
  r.correctness.clear();
  r.performance.clear();
  for (auto& text : job.correctness_inputs) {
    correctness_record c;
    c.op_name = job.op_name;
    c.args = args::serialize_text(text);
    c.error_type = why.type;
    c.error_msg = why.message;
    c.traceback = why.traceback;
    r.correctness.push_back(std::move(c));
  }
  for (auto& text : job.performance_inputs) {
    performance_record p;
    p.op_name = job.op_name;
    p.args = args::serialize_text(text);
    p.speedup = 1.0;
    p.error_msg = why.type + ": " + why.message;
    r.performance.push_back(std::move(p));
  }
}

bool any_cuda_error(const eval_result& r) {
  for (auto& c : r.correctness)
    if (c.error_type == "cuda_error")
      return true;
  for (auto& p : r.performance)
    if (p.error_msg.rfind("cuda_error", 0) == 0)
      return true;
  return false;
}

// The whole job, apart from the guard against the runner's own failures.
void run_job(eval_result& r, const eval_job& job, const runner_options& opts,
             const progress_fn& progress, phase_clock& phases) {
  auto name = ops::to_schema_name(job.op_name);
  auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!handle) {
    r.outcome = outcome::unsupported;
    r.detail = "unsupported op: " + job.op_name + " is not in torch " TORCH_VERSION;
    return;
  }
  c10::OperatorHandle op = *handle;
  // As BackendBench: a kernel that works on a stream of its own is skipped, never timed.
  if (job.kernel.kind != "aten" && uses_cuda_stream(job.kernel.source)) {
    r.flags.push_back("uses_cuda_stream");
    fail_every_input(r, job, {"uses_cuda_stream", "Skipped: uses CUDA stream", ""});
    return;
  }
  step loading;
  loading.text = "loading the kernel";
  loading.setup = true;
  progress(loading);
  auto reference = make_aten_kernel(op);
  std::unique_ptr<kernel> impl;
  call_error load_failure;
  phases.time("load_kernel", [&] {
    try {
      impl = load_kernel(job.kernel, op);
    } catch (const kernel_load_error& e) {
      load_failure = {e.kind, e.what(), ""};
    } catch (const python_error& e) {
      load_failure = {e.type, e.what(), e.traceback};
    } catch (const std::exception& e) {
      load_failure = {"load_error", e.what(), ""};
    }
  });
  if (!impl) {
    // Every input fails with the reason, so the reports list them all.
    fail_every_input(r, job, load_failure);
    r.outcome = outcome::exception;
    r.detail = load_failure.type + ": " + load_failure.message;
    return;
  }
  op_context ctx{job, opts, progress, op, at::Device(opts.device), *reference, *impl, r.flags, phases, {}};
  at::NoGradGuard no_grad;
  auto n = job.correctness_inputs.size();
  auto m = job.performance_inputs.size();
  // An input's tensors live until its last use, so a job of many inputs holds one at a time.
  std::map<std::string, size_t> uses;
  for (auto& text : job.correctness_inputs)
    ++uses[text];
  for (auto& text : job.performance_inputs)
    ++uses[text];
  auto used = [&](const std::string& text) {
    if (--uses[text] == 0)
      ctx.inputs.erase(text);
  };
  if (job.correctness_inputs == job.performance_inputs) {
    // BackendBench's torchbench suite: the same inputs for both. Each is checked, then timed.
    for (size_t i = 0; i < n; ++i) {
      r.correctness.push_back(check_input(ctx, job.correctness_inputs[i], i, n));
      used(job.correctness_inputs[i]);
      r.performance.push_back(time_input(ctx, job.performance_inputs[i], i, m));
      used(job.performance_inputs[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      r.correctness.push_back(check_input(ctx, job.correctness_inputs[i], i, n));
      used(job.correctness_inputs[i]);
    }
    for (size_t i = 0; i < m; ++i) {
      r.performance.push_back(time_input(ctx, job.performance_inputs[i], i, m));
      used(job.performance_inputs[i]);
    }
  }
  if (python_timers_tampered()) {
    // The timer is C++ and out of reach, but such a kernel is not to be trusted.
    r.flags.push_back("replaces_timer");
    fail_every_input(r, job, {"replaces_timer", "the kernel replaced a timing function", ""});
  }
  if (any_cuda_error(r)) {
    r.outcome = outcome::cuda_error;
    r.detail = "the CUDA context was lost; the runner is replaced";
  }
}

} // namespace

eval_result evaluate_job(const eval_job& job, const runner_options& opts, const progress_fn& progress) {
  auto start = clock::now();
  auto r = result_for(job, describe(opts));
  phase_clock phases;
  try {
    run_job(r, job, opts, progress, phases);
  } catch (const std::exception& e) {
    // The runner's own code failed: not the kernel's doing. The job goes back to the queue
    // (infra_error is retried) and, if it fails again, says so in its report.
    r.correctness.clear();
    r.performance.clear();
    r.flags.clear();
    fail_every_input(r, job, {"infra_error", e.what(), ""});
    r.outcome = outcome::infra_error;
    r.detail = e.what();
  }
  r.phases = std::move(phases.seconds);
  r.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  return r;
}

} // namespace bb::runner
