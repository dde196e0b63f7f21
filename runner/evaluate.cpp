#include "runner/runner.hpp"

#include <algorithm>
#include <iostream>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <functional>
#include <set>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "runner/compare.hpp"
#include "runner/guards.hpp"
#include "runner/honesty.hpp"
#include "runner/inputs.hpp"
#include "runner/kernel.hpp"
#include "runner/native_kernel.hpp"
#include "runner/code_guard.hpp"
#include "runner/opinfo.hpp"
#include "runner/python_kernel.hpp"
#include "runner/stream_watch.hpp"
#include "runner/timing.hpp"
#include "suite/args.hpp"
#include "suite/ops.hpp"

namespace bb::runner {

namespace {

using clock = std::chrono::steady_clock;

// A failure of one call, as the record fields want it.
struct call_error {
  /// The input's verdict: exception for what the kernel raised and for a check it failed.
  outcome verdict = outcome::exception;
  /// What the record's error_type says: the outcome's name, or the exception's type (a
  /// Python exception's, "exception" for a C++ one), or the check's name (tensor_subclass).
  std::string type;
  std::string message;
  std::string traceback;

  call_error() = default;
  /// An outcome of its own: its name is the type.
  call_error(outcome v, std::string message, std::string traceback = "")
      : verdict(v), type(to_string(v)), message(std::move(message)), traceback(std::move(traceback)) {}
  /// An exception, or a failed check, of this type.
  call_error(std::string type, std::string message, std::string traceback)
      : type(std::move(type)), message(std::move(message)), traceback(std::move(traceback)) {}

  /// Recorded (set by the failure that made it).
  bool failed() const { return !type.empty(); }
  /// The same failure as another outcome (a failure of the reference's is reference_error).
  void relabel(outcome v) {
    verdict = v;
    type = to_string(v);
  }
};

bool contains(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

// Errors that say the CUDA context is gone (cuda_error), and allocation failures (oom),
// whatever raised them; any other is an exception.
outcome classify(const std::string& type, const std::string& message) {
  if (contains(message, "CUDA error") || contains(message, "cudaError")
      || contains(message, "illegal memory access") || contains(message, "device-side assert")
      || contains(message, "CUDA driver error"))
    return outcome::cuda_error;
  if (type == "OutOfMemoryError" || type == "MemoryError" || contains(message, "out of memory")
      || contains(message, "not enough memory") || contains(message, "can't allocate memory"))
    return outcome::oom;
  return outcome::exception;
}

// What `type` raised with `message`: an exception of that type, unless it says cuda_error or oom.
call_error raised(const std::string& type, std::string message, std::string traceback) {
  auto v = classify(type, message);
  if (v != outcome::exception)
    return call_error(v, std::move(message), std::move(traceback));
  return call_error(type, std::move(message), std::move(traceback));
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
    return call_error(outcome::oom, e.what_without_backtrace(), e.what());
  } catch (const python_error& e) {
    return raised(e.type, e.what(), e.traceback);
  } catch (const c10::Error& e) {
    return raised("exception", e.what_without_backtrace(), e.what());
  } catch (const std::bad_alloc& e) {
    return call_error(outcome::oom, e.what());
  } catch (const std::exception& e) {
    return raised("exception", e.what(), "");
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
    if (classify("", e.what_without_backtrace()) == outcome::cuda_error)
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
  /// The exploit checks' view of the process before the kernel loaded (exploit_checks only).
  const dispatcher_fingerprint* dispatcher = nullptr;
  const process_state* state = nullptr;
  /// Set when a tamper check failed: every input fails with this reason, the rest are skipped.
  std::optional<call_error> tampered;
  /// Set when the kernel left work off the timed stream: its inputs get the synchronized timer.
  bool synchronized_timer = false;
  /// Set once the kernel has been called: a lost CUDA context before that is not its doing.
  bool* kernel_called = nullptr;
};

void raise_flag(op_context& ctx, const std::string& flag) {
  if (std::find(ctx.flags.begin(), ctx.flags.end(), flag) == ctx.flags.end())
    ctx.flags.push_back(flag);
}

bool checks_on(const op_context& ctx) {
  return ctx.opts.exploit_checks;
}

bool python_kernel_of(const op_context& ctx) {
  return ctx.job.kernel.kind == kernel_kind::py;
}

// The relied-on operators' tables as they were before any kernel of this runner loaded (taken
// again once Python starts: importing torch registers kernels of its own). A job adds its own
// operator's table. A job whose kernel changed any of them ends its runner, so every job of
// a runner starts from the same state.
const dispatcher_fingerprint& relied_on_baseline() {
  static std::optional<dispatcher_fingerprint> baseline;
  static bool with_python = false;
  if (!baseline || with_python != python_started()) {
    baseline.emplace();
    with_python = python_started();
  }
  return *baseline;
}

void set_tampered(op_context& ctx, const std::string& flag, const std::string& why) {
  raise_flag(ctx, flag);
  if (!ctx.tampered)
    ctx.tampered = call_error(flag, why, "");
}

// After kernel code ran (it loaded, a checked call, the timed calls, the job's end): whatever
// it changed that the evaluation relies on. Each finding is a flag that fails every input of
// the job; the process state is put back. Every relied-on operator's dispatcher table and the
// evaluated one's each time (tens of microseconds).
// With `all_code` (after the kernel loads, at the job's end), bbrunner's own code and the
// process's mappings are checked too (code_guard.hpp), not only the timer's functions.
void check_tampering(op_context& ctx, bool all_code = false) {
  check_timing_code();
  if (python_kernel_of(ctx) && python_timers_tampered())
    set_tampered(ctx, "replaces_timer", "the kernel replaced a timing function");
  // torch's GPU trace (torch._C._activate_gpu_trace, the CUDA sanitizer's) runs Python
  // callbacks inside every event record and device synchronization the timer makes: a sleep
  // there lands inside the reference's measured interval. bbrunner never turns it on.
  if (c10::impl::GPUTrace::get_trace() != nullptr)
    set_tampered(ctx, "replaces_timer",
                 "the kernel turned on torch's GPU trace, whose callbacks run inside the timer's event records "
                 "and synchronizations");
  if (!checks_on(ctx))
    return;
  if (python_kernel_of(ctx) && python_comparison_tampered())
    set_tampered(ctx, "replaces_comparison",
                 "the kernel replaced a comparison function (torch.allclose, torch.equal, "
                 "torch.testing.assert_close or a Tensor method)");
  if (ctx.dispatcher) {
    auto changed = ctx.dispatcher->changed();
    if (!changed.empty())
      set_tampered(ctx, "replaces_operator",
                   "the kernel changed the dispatcher's kernel of " + changed.front()
                     + (changed.size() > 1 ? " and " + std::to_string(changed.size() - 1) + " more" : ""));
  }
  if (all_code)
    check_all_code();
  if (auto found = code_finding(); !found.empty())
    set_tampered(ctx, "patches_code", "the kernel changed code the timer relies on, or the way to it: " + found);
  if (ctx.state) {
    auto c = ctx.state->compare();
    if (!c.dispatch.empty())
      set_tampered(ctx, "changes_dispatch", "the kernel changed how operators dispatch: " + c.dispatch.front());
    if (!c.global.empty())
      set_tampered(ctx, "changes_global_state",
                   "the kernel changed a process-wide setting the reference depends on: " + c.global.front());
    if (!c.dispatch.empty() || !c.global.empty())
      ctx.state->restore();
  }
}

// The bytes of every tensor storage of a call, each storage once.
int64_t bytes_of(const built_call& call) {
  std::set<const void*> seen;
  int64_t total = 0;
  std::function<void(const c10::IValue&)> add = [&](const c10::IValue& v) {
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined() && t.has_storage() && seen.insert(t.storage().data()).second)
        total += static_cast<int64_t>(t.storage().nbytes());
    } else if (v.isList()) {
      for (const auto& x : v.toListRef())
        add(x);
    } else if (v.isTuple()) {
      for (const auto& x : v.toTupleRef().elements())
        add(x);
    }
  };
  for (const auto& a : call.args)
    add(a);
  for (const auto& [name, v] : call.kwargs)
    add(v);
  return total;
}

// The tensors of a prepared input, as a call (what poison_outputs keeps).
built_call tensors_of(const prepared_input& in) {
  built_call c;
  c.args = in.stack.empty() ? in.args : in.stack;
  for (auto& [name, v] : in.kwargs)
    c.kwargs.emplace(name, v);
  return c;
}

// An input that ended, for a job with a stream_tag: its records, to the evaluator.
void stream_input(op_context& ctx, size_t index, const correctness_record* c, const performance_record* p) {
  if (ctx.job.stream_tag.empty())
    return;
  step s;
  s.input = p ? input_kind::performance : input_kind::correctness;
  s.input_index = static_cast<uint32_t>(index);
  s.correctness = c;
  s.performance = p;
  ctx.progress(s);
}

void tell(op_context& ctx, std::string text, code_side side, input_kind kind, size_t index, bool own = false) {
  step s;
  s.text = std::move(text);
  // bbrunner's own work on the input's data (building it, checking results): bounded by the
  // start timeout rather than a call's (a loaded machine comparing 100 MB is no hung kernel).
  s.setup = own;
  // With the aten backend the kernel is the reference: whatever it does is the reference's.
  s.side = side == code_side::kernel && ctx.job.kernel.kind == kernel_kind::aten ? code_side::reference : side;
  s.input = kind;
  s.input_index = static_cast<uint32_t>(index);
  ctx.progress(s);
}

input_state& input(op_context& ctx, const std::string& text, const std::string& label,
                   input_kind kind, size_t index) {
  auto& st = ctx.inputs[text];
  if (st.call || st.build_error.failed())
    return st;
  tell(ctx, label + ": building inputs", code_side::neither, kind, index, true);
  if (is_opinfo_sample(text)) {
    // An OpInfo sample: rebuilt in the embedded Python from its description and seed.
    if (auto failure = ctx.phases.time("build_inputs", [&] {
          return guarded([&] { st.call = build_opinfo_sample(text, ctx.op.schema(), ctx.device); });
        })) {
      st.build_error = *failure;
      if (st.build_error.verdict != outcome::cuda_error)
        st.build_error.relabel(outcome::reference_error);
    }
    return st;
  }
  auto parsed = args::parse_call(text);
  if (auto* e = std::get_if<args::parse_error>(&parsed)) {
    st.build_error = call_error("bad_input", "cannot parse input: " + args::to_string(*e), "");
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
    if (st.build_error.verdict != outcome::cuda_error)
      st.build_error.relabel(outcome_prefix(failure->message) == outcome::unsupported ? outcome::unsupported
                                                                                      : outcome::reference_error);
  }
  return st;
}

// One call of `k` on a fresh clone of `call`, timed as `phase`: what it threw, if anything.
// With `pending_ms`, the wait for the device is split: the call's stream first, then the
// whole device, whose milliseconds are work the call left elsewhere (pending_device_work_ms).
// With `poison_like`, the memory outputs like it would take is filled with the canary after
// the input's copies are made and before the call (poison_memory_for), so that a kernel
// reading an output it never wrote reads NaN.
// With `watched`, the call's launches are watched (stream_watch): what it put on other streams.
std::optional<call_error> run_one_call(op_context& ctx, const char* phase, const kernel& k,
                                       const built_call& call, prepared_input& in, c10::IValue& out,
                                       double* pending_ms = nullptr, const c10::IValue* poison_like = nullptr,
                                       stream_report* watched = nullptr) {
  // The kernel's first call of the job carries what its JIT libraries compile (Triton,
  // TorchInductor) and tune: counted apart.
  if (&k == &ctx.impl && ctx.kernel_called && !*ctx.kernel_called)
    phase = "first_kernel_call";
  return ctx.phases.time(phase, [&] {
    return guarded([&] {
      in = prepare(call, ctx.op.schema(), &k);
      if (poison_like)
        own("poisoning the memory the outputs take", [&] { poison_memory_for(*poison_like, ctx.opts.device); });
      if (&k == &ctx.impl && ctx.kernel_called)
        *ctx.kernel_called = true;
      if (watched) {
        stream_watch watch;
        out = k.call(in);
        *watched = watch.stop();
      } else {
        out = k.call(in);
      }
      if (pending_ms)
        *pending_ms = pending_device_work_ms(ctx.opts.device);
      else
        synchronize(ctx.opts.device);
    });
  });
}

// A device-wide synchronization that waits longer than this after the call's stream is done
// means work left elsewhere (an idle device answers in microseconds).
constexpr double pending_work_threshold_ms = 0.03;

// One checked call of the kernel with the exploit checks around it: the memory its outputs
// take poisoned once its input's copies are made, then after the call its threads, pending
// device work, output types and the process state.
std::optional<call_error> run_checked_kernel_call(op_context& ctx, const built_call& call,
                                                  prepared_input& in, c10::IValue& res,
                                                  const c10::IValue& ref) {
  if (!checks_on(ctx))
    return run_one_call(ctx, "kernel_calls", ctx.impl, call, in, res);
  if (python_kernel_of(ctx))
    python_mark_threads();
  double pending = 0.0;
  stream_report streams;
  bool cuda = ctx.opts.device == "cuda";
  static bool told_unwatched = false;
  if (std::string why; cuda && !told_unwatched && !stream_watch_available(&why)) {
    told_unwatched = true;
    std::cerr << "bbrunner: launches are not watched (" << why
              << "): work left on another stream is found only when it outlasts the call by "
              << pending_work_threshold_ms << " ms" << std::endl;
  }
  // On a CPU the heap is not poisoned here: the reference's own call is not either, and an
  // operator that leaves part of its output unwritten (grid_sampler_2d_backward) would then
  // differ from itself.
  auto e = run_one_call(ctx, "kernel_calls", ctx.impl, call, in, res, &pending, cuda ? &ref : nullptr,
                        cuda ? &streams : nullptr);
  if (!streams.elsewhere.empty() && !ctx.synchronized_timer) {
    // Work on another stream, seen at its launch however short: timed with the whole device.
    std::string seen;
    for (auto& s : streams.elsewhere)
      seen += (seen.empty() ? "" : ", ") + s;
    std::cerr << "bbrunner: " << ctx.job.op_name << ": the kernel put work on another stream than its caller's ("
              << seen << "): timed with the synchronized timer" << std::endl;
    raise_flag(ctx, "work_off_timed_stream");
    ctx.synchronized_timer = true;
  }
  // Without the watch (no CUPTI), a device-wide synchronization that waits on after the call's
  // stream is done says the same of work long enough to see.
  if (!e && pending > pending_work_threshold_ms && !ctx.synchronized_timer) {
    // Confirmed on two more calls, so that a hiccup of the host is not taken for hidden work.
    double least = pending;
    for (int i = 0; i < 2 && least > pending_work_threshold_ms; ++i) {
      prepared_input again_in;
      c10::IValue again;
      double p = 0.0;
      if (run_one_call(ctx, "kernel_calls", ctx.impl, call, again_in, again, &p))
        break;
      least = std::min(least, p);
    }
    if (least > pending_work_threshold_ms) {
      raise_flag(ctx, "work_off_timed_stream");
      ctx.synchronized_timer = true;
    }
  }
  synchronize(ctx.opts.device);
  if (e && e->type == "tensor_subclass")
    raise_flag(ctx, "tensor_subclass");
  if (!e && python_kernel_of(ctx)) {
    auto threads = python_new_threads();
    if (!threads.empty()) {
      raise_flag(ctx, "leaves_thread_running");
      e = call_error("leaves_thread_running",
                     "a thread the kernel started (" + threads.front()
                       + ") was still running after its call returned: work outside the call is not measured",
                     "");
    }
  }
  if (!e) {
    auto why = own("checking the kernel's output types", [&] { return not_plain(res, ref); });
    if (!why.empty()) {
      raise_flag(ctx, "tensor_subclass");
      e = call_error("tensor_subclass", "the kernel returned " + why + ": outputs must be plain tensors", "");
    }
  }
  check_tampering(ctx);
  return e;
}

// The reference's answer is overwritten with the canary, outputs and input copies alike (an
// in-place operator's answer is its input): its shapes and types stay, its values are gone.
void overwrite_answer(const c10::IValue& out, const prepared_input& in) {
  own("overwriting the reference's answer", [&] {
    poison_outputs(out, built_call{});
    auto inputs = tensors_of(in);
    for (auto& arg : inputs.args)
      poison_outputs(arg, built_call{});
    for (auto& [name, arg] : inputs.kwargs)
      poison_outputs(arg, built_call{});
  });
}

// The reference's call on `call` after the kernel's, for the values compared (its first answer,
// overwritten, is let go first: no more memory is held than for one reference call). Told as
// neither side's: the reference ran on this input before the kernel, so a crash or a hang now
// is no reason to leave the input out.
std::optional<call_error> reference_after_kernel(op_context& ctx, const built_call& call, prepared_input& ref_in,
                                                 c10::IValue& ref, const std::string& label, input_kind kind,
                                                 size_t index) {
  ref = c10::IValue();
  ref_in = prepared_input{};
  tell(ctx, label + ": reference, for the values to compare", code_side::neither, kind, index);
  return run_one_call(ctx, "reference_calls", ctx.reference, call, ref_in, ref);
}

// Does the reference agree with itself on `call`? (Some of aten's kernels leave part of an
// output unwritten on some devices and dtypes.) Empty when it does, else why not.
std::string reference_disagrees(op_context& ctx, const built_call& call, const c10::IValue& ref) {
  // Twice: a kernel that reads memory it never wrote can agree with itself once by chance,
  // the more so where it is given the same memory each time. The first time, the memory its
  // outputs will likely take is filled with the canary first.
  for (int i = 0; i < 2; ++i) {
    prepared_input again_in;
    c10::IValue again;
    if (auto e = run_one_call(ctx, "reference_calls", ctx.reference, call, again_in, again, nullptr,
                              i == 0 ? &ref : nullptr))
      return "it failed when run again: " + e->message;
    auto self_check = ctx.phases.time("compare", [&] {
      return own("comparing the reference with itself", [&] { return compare(ref, again, ctx.opts.atol, ctx.opts.rtol); });
    });
    if (!self_check.ok)
      return self_check.message;
  }
  return "";
}

// checks.extra_inputs: the same input with signed values, and with zeros, infinities and NaN.
// A variant the reference fails or disagrees with itself on says nothing and is passed over.
void check_extra_inputs(op_context& ctx, input_state& st, const std::string& label,
                        input_kind kind, size_t index) {
  // Operators whose CUDA kernels assert on their values (a probability, a target in [0, 1]):
  // a signed or NaN value would end the runner's CUDA context, not test the kernel.
  static const std::set<std::string> asserting = {
    "aten::binary_cross_entropy", "aten::binary_cross_entropy_backward", "aten::bernoulli",
    "aten::bernoulli_", "aten::multinomial", "aten::_sample_dirichlet", "aten::poisson",
    "aten::binomial", "aten::_standard_gamma", "aten::histc", "aten::bincount"};
  if (ctx.device.is_cuda() && asserting.count(ctx.op.schema().name()))
    return;
  auto variants = own("building the extra inputs", [&] {
    if (!has_float_tensors(*st.call))
      return std::vector<variant>{};
    return extra_inputs(*st.call, input_seed(ctx.job.op_name, label), ctx.device);
  });
  for (auto& v : variants) {
    auto what = label + ", extra input '" + v.name + "'";
    tell(ctx, what + ": reference", code_side::reference, kind, index);
    prepared_input ref_in, in;
    c10::IValue ref, res;
    if (run_one_call(ctx, "reference_calls", ctx.reference, v.call, ref_in, ref))
      continue;
    // Indices among zeros and infinities are ties that an honest kernel may break another way.
    if (own("looking at the reference's output", [&] { return has_integer_tensors(ref); }))
      continue;
    // As in check(): with the checks on, the kernel runs with no answer for these values in
    // the process.
    if (checks_on(ctx))
      overwrite_answer(ref, ref_in);
    tell(ctx, what + ": kernel", code_side::kernel, kind, index);
    if (auto e = run_checked_kernel_call(ctx, v.call, in, res, ref)) {
      e->message = "on its extra input '" + v.name + "' (" + label + "): " + e->message;
      st.run_error = e;
      return;
    }
    if (checks_on(ctx) && reference_after_kernel(ctx, v.call, ref_in, ref, what, kind, index))
      continue;
    auto verdict = ctx.phases.time("compare", [&] {
      return own("comparing the results", [&] { return compare(ref, res, ctx.opts.atol, ctx.opts.rtol); });
    });
    // With the aten backend the kernel is the reference: a difference is aten's own.
    if (verdict.ok || ctx.job.kernel.kind == kernel_kind::aten || !reference_disagrees(ctx, v.call, ref).empty())
      continue;
    st.verdict = verdict;
    st.verdict.message = "wrong on its extra input '" + v.name + "' of " + label
                         + " (the input's floating-point values made "
                         + (v.name == "signed values" ? "signed" : "signed, with zeros, infinities and NaN")
                         + "): " + verdict.message;
    return;
  }
}

// Runs the reference and the kernel on fresh clones, compares their results and checks the
// kernel's honesty against what the reference itself did on the same input. With the exploit
// checks, no answer for these values exists in the process while the kernel's
// call runs (on a GPU a kernel could find the reference's output among the caching allocator's
// blocks and copy it): the reference's first call tells that the operator takes the input and
// what its outputs look like, its answer is then overwritten, and the reference runs again
// after the kernel for the values compared. Without them, BackendBench's order: reference, kernel.
void check(op_context& ctx, input_state& st, const std::string& label, input_kind kind, size_t index) {
  if (st.checked)
    return;
  st.checked = true;
  const auto& schema = ctx.op.schema();
  tell(ctx, label + ": reference", code_side::reference, kind, index);
  prepared_input ref_in;
  c10::IValue ref, res;
  // An input the operator cannot take is the reference's failure.
  if (auto e = run_one_call(ctx, "reference_calls", ctx.reference, *st.call, ref_in, ref)) {
    if (e->verdict != outcome::cuda_error)
      e->relabel(outcome::reference_error);
    st.run_error = e;
    return;
  }
  if (checks_on(ctx))
    overwrite_answer(ref, ref_in);
  tell(ctx, label + ": kernel", code_side::kernel, kind, index);
  prepared_input in;
  auto e = run_checked_kernel_call(ctx, *st.call, in, res, ref);
  if (!e && checks_on(ctx)) {
    if (auto again = reference_after_kernel(ctx, *st.call, ref_in, ref, label, kind, index)) {
      // It raised: the evaluator runs it again where the kernel never ran.
      if (again->verdict != outcome::cuda_error)
        again->relabel(outcome::reference_error);
      e = again;
    }
  }
  // Once used, outputs read as NaN: a later call that returns memory it never wrote gets NaN.
  struct poison_on_exit {
    op_context& ctx;
    c10::IValue& ref;
    c10::IValue& res;
    prepared_input& ref_in;
    prepared_input& in;
    ~poison_on_exit() {
      if (!checks_on(ctx))
        return;
      try {
        poison_outputs(ref, tensors_of(ref_in));
        poison_outputs(res, tensors_of(in));
      } catch (const std::exception&) {
        // An output the canary cannot be written to is left as it is.
      }
    }
  } poison{ctx, ref, res, ref_in, in};
  if (e) {
    st.run_error = e;
    return;
  }
  tell(ctx, label + ": checking", code_side::neither, kind, index, true);
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
  if (st.verdict.ok) {
    if (ctx.opts.extra_inputs)
      check_extra_inputs(ctx, st, label, kind, index);
    return;
  }
  // Before the kernel is blamed: does the reference agree with itself? Some of aten's kernels
  // leave part of an output unwritten on some devices and dtypes; such an input says nothing
  // about the kernel and is left out.
  tell(ctx, label + ": reference again", code_side::reference, kind, index);
  auto why = reference_disagrees(ctx, *st.call, ref);
  // The aten backend's kernel is the reference: its result differing is the reference
  // disagreeing with itself, however often the runs again happened to agree.
  if (why.empty() && ctx.job.kernel.kind == kernel_kind::aten)
    why = "the aten backend's kernel is the reference, and their results differ: " + st.verdict.message;
  if (!why.empty() && why.rfind("it failed when run again", 0) != 0)
    st.run_error = call_error(outcome::reference_error, std::string(reference_disagrees_text) + " on this input: " + why);
}

template <class T, class P>
const T* find_in(const std::vector<T>& xs, P pred) {
  auto it = std::find_if(xs.begin(), xs.end(), pred);
  return it == xs.end() ? nullptr : &*it;
}

const input_failure* left_out(const eval_job& job, input_kind kind, size_t index) {
  return find_in(job.reference_failures,
                 [&](const input_failure& f) { return f.kind == kind && f.index == index; });
}

// "correctness input 7/10": numbered among the operator's inputs, so that a shard's messages
// (a crash's detail among them) read as an unsharded job's.
std::string input_label(const eval_job& job, input_kind kind, size_t i, size_t n) {
  const auto& s = job.shard;
  bool correctness = kind == input_kind::correctness;
  if (s.is_part()) {
    i += correctness ? s.correctness_begin : s.performance_begin;
    n = correctness ? s.correctness_total : s.performance_total;
  }
  return std::string(to_string(kind)) + " input " + std::to_string(i + 1) + "/" + std::to_string(n);
}

correctness_record check_input(op_context& ctx, const std::string& text, size_t i, size_t n) {
  correctness_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  if (auto f = left_out(ctx.job, input_kind::correctness, i)) {
    rec.error_type = to_string(outcome::reference_error);
    rec.error_msg = f->message;
    return rec;
  }
  auto label = input_label(ctx.job, input_kind::correctness, i, n);
  auto& st = input(ctx, text, label, input_kind::correctness, i);
  call_error err = st.build_error;
  if (st.call) {
    check(ctx, st, label, input_kind::correctness, i);
    if (st.run_error)
      err = *st.run_error;
  }
  if (err.failed()) {
    rec.error_type = err.type;
    rec.error_msg = err.message;
    rec.traceback = err.traceback;
    return rec;
  }
  rec.is_correct = st.verdict.ok;
  rec.max_abs_error = st.verdict.max_abs_error;
  rec.max_rel_error = st.verdict.max_rel_error;
  if (!st.verdict.ok) {
    rec.error_type = to_string(outcome::incorrect);
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
  if (auto f = left_out(ctx.job, input_kind::performance, i)) {
    rec.error_msg = std::string(to_string(outcome::reference_error)) + ": " + f->message;
    return rec;
  }
  auto label = input_label(ctx.job, input_kind::performance, i, n);
  auto& st = input(ctx, text, label, input_kind::performance, i);
  if (!st.call) {
    rec.error_msg = st.build_error.type + ": " + st.build_error.message;
    return rec;
  }
  // As BackendBench, only a kernel that is correct on this input is timed; the same input's
  // correctness check is not repeated.
  check(ctx, st, label, input_kind::performance, i);
  if (st.run_error) {
    rec.error_msg = st.run_error->type + ": " + st.run_error->message;
    return rec;
  }
  if (!st.verdict.ok) {
    rec.error_msg = "incorrect: " + st.verdict.message;
    return rec;
  }
  // Two sets of buffers: the reference uses one and the kernel the other, swapped every round,
  // so that where a buffer lies in memory favours neither side. As BackendBench, with the
  // exploit checks off the same inputs are reused call after call; with them on, every call of
  // either side gets floating-point values no call has seen (refilled outside the measured
  // interval, the same values for both sides), the last call of each round has its input and
  // output kept to be checked, and every output is poisoned once used.
  const auto& schema = ctx.op.schema();
  built_call bufs[2];
  prepared_input ref_in[2], in[2];
  built_call both; // every tensor of both buffers: outputs that are these are not poisoned
  input_refresher refreshers[2];
  own("preparing the timed inputs", [&] {
    bufs[0] = clone_call(*st.call);
    bufs[1] = clone_call(*st.call);
    if (checks_on(ctx)) {
      refreshers[0] = input_refresher(bufs[0], ctx.device);
      refreshers[1] = input_refresher(bufs[1], ctx.device);
    }
    ref_in[0] = prepare_shared(bufs[0], schema, &ctx.reference);
    in[0] = prepare_shared(bufs[1], schema, &ctx.impl);
    ref_in[1] = prepare_shared(bufs[1], schema, &ctx.reference);
    in[1] = prepare_shared(bufs[0], schema, &ctx.impl);
    for (auto& b : bufs) {
      both.args.insert(both.args.end(), b.args.begin(), b.args.end());
      for (auto& [name, v] : b.kwargs)
        both.args.push_back(v);
    }
  });
  // A cached figure is what the calibration's drift is told against: its mean alone.
  side_timing cached;
  auto hit = cached_for(ctx.job, i);
  if (hit)
    cached.mean_ms = hit->mean_ms;
  // What the kernel's checked calls saw and returned (checked_per_round a round). At most
  // max_checked_calls are kept (checked_slot: later ones take a kept one's place as reservoir
  // sampling does), and the reference runs on each kept input once the timing is done. None
  // of the reference's timed outputs is kept: the sides' calls of a round get the same
  // values, and a reference's answer alive while the kernel's call on those values runs could
  // be found and copied. The copies go into slots made before the timing, so that no copy
  // allocates memory between timed calls: a call whose output had to come from fresh pages (a
  // CPU) or a fresh cudaMalloc would be slower.
  struct call_copy {
    int64_t round = -1; // -1: nothing kept here (yet)
    int rank = -1;
    int64_t call_number = 0;
    built_call input;
    c10::IValue output;
  };
  constexpr size_t max_checked_calls = 12;
  bool on = checks_on(ctx);
  std::vector<call_copy> kept;  // the kernel's
  call_copy dropped;            // where a call not kept is copied, so every checked call costs the same
  bool scratch = false;         // whether dropped has room (not for the largest calls)
  // The reference's checked calls copy as much as the kernel's, none of it an answer: its input
  // into a slot, and into its output slot a buffer of the output's size that holds the canary.
  // The device then has the same work queued on both sides when a checked call's flush and
  // interval begin (a side whose device idles there pays its call's launch inside the interval).
  call_copy mirror;
  c10::IValue mirror_source;
  if (on)
    ctx.phases.time("check_timed", [&] {
      own("making room for the checked calls' copies", [&] {
        // Outputs of the right structure to copy into: the reference's on these values.
        prepared_input shape_in = prepare(bufs[0], schema, &ctx.reference);
        c10::IValue shape_out = ctx.reference.call(shape_in);
        synchronize(ctx.opts.device);
        overwrite_answer(shape_out, shape_in);
        // No more slots than a measurement of opts.rounds fills, and no more memory than a
        // budget for the slots, the scratch, the mirror and its source (about one copy each),
        // but always one slot and the mirror: a call of 3 GiB keeps one slot and copies only
        // the calls it keeps.
        int64_t per_copy = bytes_of(tensors_of(shape_in)) + bytes_of(built_call{{shape_out}, {}});
        int64_t budget = ctx.device.is_cuda() ? int64_t{8} << 30 : int64_t{1} << 30;
        auto fit = static_cast<size_t>(budget / std::max<int64_t>(1, per_copy));
        auto slots = std::min<size_t>({max_checked_calls,
                                       checked_per_round * static_cast<size_t>(std::max<int64_t>(1, ctx.opts.rounds)),
                                       std::max<size_t>(1, fit > 3 ? fit - 3 : 1)});
        scratch = fit >= 4;
        auto make = [&] { return call_copy{-1, -1, 0, empty_call_like(bufs[0]), empty_value_like(shape_out)}; };
        for (size_t n = 0; n < slots; ++n)
          kept.push_back(make());
        if (scratch)
          dropped = make();
        mirror = make();
        mirror_source = empty_value_like(shape_out);
        poison_outputs(mirror_source, built_call{});
      });
    });
  int64_t kernel_calls_made = 0;
  // The host's seconds in the hooks around the timed calls (fresh values, kept and poisoned
  // outputs): the checks' share of the timer's wall time, told as check_timed.
  double hook_seconds = 0.0;
  struct hook_clock {
    double& total;
    clock::time_point begin = clock::now();
    ~hook_clock() { total += std::chrono::duration<double>(clock::now() - begin).count(); }
  };
  c10::IValue outputs[2];
  // What each side's call returned when the cudagraph timer captured it, per round parity.
  c10::IValue graph_outputs[2][2];
  // A graph would freeze the values of an input on the CPU (a 0-d tensor, a CPU operand): the
  // fresh values of timed calls would not reach its replays.
  std::string graph_refusal;
  each_tensor(bufs[0], [&](const at::Tensor& t) {
    if (graph_refusal.empty() && !t.is_cuda())
      graph_refusal = "an input is on the " + t.device().str() + ": a graph would freeze its values";
  });
  uint64_t seed = input_seed(ctx.job.op_name, text);
  uint64_t measurement = 0; // 1 for an outlier's measurement again: fresh values there too
  double unverified = 0.0;
  // The slot the kernel's checked call is copied into; null: none (not kept, and no scratch).
  auto slot_of = [&](const call_point& p) -> call_copy* {
    auto j = checked_slot(static_cast<uint64_t>(p.round * checked_per_round + p.rank), kept.size(), measurement);
    if (j < 0)
      return scratch ? &dropped : nullptr;
    return &kept[static_cast<size_t>(j)];
  };
  auto make_side = [&](bool kernel_side) {
    const kernel* k = kernel_side ? &ctx.impl : &ctx.reference;
    prepared_input* ins = kernel_side ? in : ref_in;
    c10::IValue* out = &outputs[kernel_side ? 1 : 0];
    int side_index = kernel_side ? 1 : 0;
    timed_side side;
    if (!on) {
      side.call = [k, ins](const call_point& p) { k->call(ins[p.round % 2]); };
      return side;
    }
    // The hooks are bbrunner's own code: what they throw is never the kernel's.
    side.before = [&, kernel_side](const call_point& p) {
      hook_clock hook{hook_seconds};
      own("refreshing the timed inputs", [&] {
        auto which = (p.round + (kernel_side ? 1 : 0)) % 2;
        auto& buf = bufs[which];
        refreshers[which].refresh(call_seed(seed, measurement, p.round, p.index, p.timed, p.checked ? p.rank : -1));
        if (p.timed && p.checked) {
          if (auto* slot = slot_of(p)) {
            if (kernel_side) {
              slot->round = -1; // until its output is copied too
              copy_call_into(slot->input, buf);
            } else {
              copy_call_into(mirror.input, buf);
            }
          }
        }
      });
    };
    side.call = [k, ins, out](const call_point& p) { *out = k->call(ins[p.round % 2]); };
    // The cudagraph timer replays the captured call: its outputs are the graph's, the same
    // tensors every replay, refilled by it.
    side.graph_output = [&graph_outputs, out, side_index](bool replayed, int64_t parity) {
      auto& kept = graph_outputs[side_index][parity % 2];
      if (replayed)
        *out = kept;
      else
        kept = *out;
    };
    side.graph_refusal = graph_refusal;
    side.after = [&, kernel_side, out](const call_point& p) {
      hook_clock hook{hook_seconds};
      own("keeping and poisoning a timed output", [&] {
        if (kernel_side)
          ++kernel_calls_made;
        if (!kernel_side && p.timed && p.checked && slot_of(p))
          copy_value_into(mirror.output, mirror_source);
        if (kernel_side && p.timed && p.checked) {
          // Copied as soon as the call returned: work that finishes later does not count.
          if (auto* slot = slot_of(p)) {
            copy_value_into(slot->output, *out);
            slot->round = p.round;
            slot->rank = p.rank;
            slot->call_number = kernel_calls_made;
          }
        }
        poison_outputs(*out, both);
        poison_answers_among(*out, both);
        *out = c10::IValue();
      });
    };
    return side;
  };
  timed_side ref_side = make_side(false), ker_side = make_side(true);
  tell(ctx, label + ": timing", code_side::neither, input_kind::performance, i);
  paired_timing timing;
  // Each side's calls are announced, so that a crash or a hang is blamed on the side that had
  // it (on a GPU, calls are queued: a fault shows at the synchronization, told as neither).
  code_side last_side = code_side::neither;
  auto on_side = [&](code_side side) {
    if (last_side == side)
      return;
    last_side = side;
    tell(ctx, label + (side == code_side::neither ? std::string(": timing") : std::string(": timing the ") + to_string(side)),
         side, input_kind::performance, i);
  };
  double wall = 0.0; // the timer's own seconds, without the checks of what it timed
  auto measure = [&](bool synchronized) {
    for (auto& c : kept)
      c.round = -1;
    measurement = synchronized && unverified > 0 ? 1 : 0;
    if (on && python_kernel_of(ctx))
      python_mark_threads();
    auto begin = clock::now();
    struct add_wall {
      double& wall;
      clock::time_point begin;
      ~add_wall() { wall += std::chrono::duration<double>(clock::now() - begin).count(); }
    } timed{wall, begin};
    if (synchronized)
      // Work off the timed stream, under the adaptive timer: synchronized calls until the mean
      // is as precise as the adaptive timer asks. An outlier's check takes every round.
      return time_pair_synchronized(ref_side, ker_side, ctx.opts, 2 * ctx.opts.rounds, on_side,
                                    ctx.opts.timer == "adaptive" && unverified <= 0);
    return time_pair(ref_side, ker_side, ctx.opts, hit ? &cached : nullptr, on_side);
  };
  // The kept outputs against the reference's on the same values, run now that the kernel's
  // calls are done: "" when all agree.
  auto verify_timed_outputs = [&]() -> std::string {
    if (python_kernel_of(ctx) && !python_new_threads().empty())
      raise_flag(ctx, "leaves_thread_running");
    ctx.phases.time("check_timed", [&] { check_tampering(ctx); });
    tell(ctx, label + ": checking the timed calls' outputs", code_side::reference, input_kind::performance, i);
    for (auto& c : kept) {
      if (c.round < 0)
        continue;
      prepared_input rin;
      c10::IValue expected;
      if (run_one_call(ctx, "check_timed", ctx.reference, c.input, rin, expected))
        continue; // the reference failed: says nothing of the kernel
      auto cmp = ctx.phases.time("check_timed", [&] {
        return own("comparing a timed call's output", [&] {
          return compare(expected, c.output, ctx.opts.atol, ctx.opts.rtol);
        });
      });
      // With the aten backend the kernel is the reference: a difference is aten's own (some
      // of its CPU half-precision kernels read memory they never wrote), never a cheat.
      if (cmp.ok || ctx.job.kernel.kind == kernel_kind::aten || !reference_disagrees(ctx, c.input, expected).empty())
        continue;
      return "timed call " + std::to_string(c.call_number) + " (in round " + std::to_string(c.round + 1)
             + ") returned a wrong result: " + cmp.message;
    }
    return "";
  };
  bool synchronized = on && ctx.synchronized_timer;
  std::string wrong;
  auto failure = guarded([&] {
    timing = measure(synchronized);
    if (!on)
      return;
    wrong = verify_timed_outputs();
    // An outlier is measured again, stricter; the stricter figure counts.
    if (wrong.empty() && !ctx.tampered && !synchronized && ctx.opts.suspicious_speedup > 0
        && timing.estimate.speedup > ctx.opts.suspicious_speedup) {
      raise_flag(ctx, "suspicious_speedup");
      unverified = timing.estimate.speedup;
      synchronized = true;
      timing = measure(true);
      wrong = verify_timed_outputs();
    }
  });
  kept.clear();
  dropped = mirror = call_copy{};
  mirror_source = c10::IValue();
  for (auto& parity : graph_outputs)
    parity[0] = parity[1] = c10::IValue();
  // The timer's wall time less its hooks' host time (check_timed), split between the sides by
  // the time their calls took.
  if (on) {
    hook_seconds = std::min(hook_seconds, wall);
    wall -= hook_seconds;
    ctx.phases.seconds["check_timed"] += hook_seconds;
  }
  double ref_share = timing.reference.mean_ms * static_cast<double>(timing.reference.calls);
  double ker_share = timing.kernel.mean_ms * static_cast<double>(timing.kernel.calls);
  double ref_part = ref_share + ker_share > 0 ? wall * ref_share / (ref_share + ker_share) : 0.0;
  ctx.phases.seconds["time_reference"] += ref_part;
  ctx.phases.seconds["time_kernel"] += wall - ref_part;
  if (failure) {
    rec.error_msg = failure->type + ": " + failure->message;
    return rec;
  }
  if (!wrong.empty()) {
    raise_flag(ctx, "wrong_in_timed_calls");
    rec.error_msg = "incorrect: " + wrong;
    return rec;
  }
  if (!timing.timer_note.empty())
    std::cerr << "bbrunner: " << ctx.job.op_name << ": timed with " << timing.timer << ", not " << ctx.opts.timer
              << ": " << timing.timer_note << std::endl;
  bool cached_used = hit != nullptr && !synchronized;
  rec.reference_time_ms = timing.reference.mean_ms;
  rec.benchmark_time_ms = timing.kernel.mean_ms;
  rec.successfully_ran = true;
  rec.speedup = timing.estimate.speedup;
  rec.speedup_ci_low = timing.estimate.ci_low;
  rec.speedup_ci_high = timing.estimate.ci_high;
  rec.timing_rounds = static_cast<uint32_t>(
    std::min(timing.reference.round_means_ms.size(), timing.kernel.round_means_ms.size()));
  rec.reference_cached = cached_used;
  // (a fallback's do_bench figure told against a cached cudagraph one is no drift)
  rec.reference_drift = cached_used && timing.timer.empty() ? timing.reference_drift : 0.0;
  // Only a reference timed with the sweep's own timer is what the cache keeps: one timed in
  // full, or a calibration that found the cached figure stale.
  // (and not one another timer measured in its place: the cache's key names the sweep's timer)
  if (!synchronized && timing.timer.empty() && cache_keeps(timing.reference_calibrated, timing.reference_drift))
    rec.reference_round_means_ms = timing.reference.round_means_ms;
  rec.unverified_speedup = unverified;
  // On a CPU every call is synchronous: measured again, it is cpu_bench with twice the runs.
  rec.timer = ctx.opts.device != "cuda"          ? "cpu_bench"
              : synchronized                     ? "synchronized"
              : !timing.timer.empty()            ? timing.timer
                                                 : ctx.opts.timer;
  return rec;
}

// A performance input whose timed calls were wrong makes the same input's correctness record
// incorrect too: a kernel right on its first call only is not correct.
void mark_timed_failure(eval_result& r, const performance_record& p) {
  static const std::string prefix = "incorrect: timed call";
  if (p.error_msg.rfind(prefix, 0) != 0)
    return;
  for (auto& c : r.correctness)
    if (c.args == p.args && c.is_correct) {
      c.is_correct = false;
      c.error_type = to_string(outcome::incorrect);
      c.error_msg = p.error_msg.substr(std::string("incorrect: ").size());
    }
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
    if (input_outcome(c) == outcome::cuda_error)
      return true;
  for (auto& p : r.performance)
    if (input_outcome(p) == outcome::cuda_error)
      return true;
  return false;
}

// The runner's own code failed: not the kernel's doing. The job goes back to the queue
// (infra_error is retried) and, if it fails again, says so in its report.
void infra_failure(eval_result& r, const eval_job& job, const std::string& why) {
  r.correctness.clear();
  r.performance.clear();
  r.flags.clear();
  fail_every_input(r, job, call_error(outcome::infra_error, why));
  r.outcome = outcome::infra_error;
  r.detail = why;
}

// The CUDA context was lost during the job: every input not yet recorded fails with the
// error, and the runner is replaced.
void lost_context(eval_result& r, const eval_job& job, const std::string& why) {
  eval_result rest = r;
  rest.correctness.clear();
  rest.performance.clear();
  fail_every_input(rest, job, call_error(outcome::cuda_error, why));
  for (size_t i = r.correctness.size(); i < rest.correctness.size(); ++i)
    r.correctness.push_back(rest.correctness[i]);
  for (size_t i = r.performance.size(); i < rest.performance.size(); ++i)
    r.performance.push_back(rest.performance[i]);
  r.outcome = outcome::cuda_error;
  r.detail = "the CUDA context was lost; the runner is replaced";
}

// Whether the last input recorded lost the CUDA context (the loops' stop, in constant time).
bool lost_context_in_last(const eval_result& r) {
  return (!r.correctness.empty() && input_outcome(r.correctness.back()) == outcome::cuda_error)
         || (!r.performance.empty() && input_outcome(r.performance.back()) == outcome::cuda_error);
}

// The whole job, apart from the guard against the runner's own failures.
void run_job(eval_result& r, const eval_job& job, const runner_options& opts,
             const progress_fn& progress, phase_clock& phases, bool& kernel_called) {
  auto name = ops::to_schema_name(job.op_name);
  auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!handle) {
    r.outcome = outcome::unsupported;
    r.detail = "unsupported op: " + job.op_name + " is not in torch " TORCH_VERSION;
    return;
  }
  c10::OperatorHandle op = *handle;
  // As BackendBench: a kernel that works on a stream of its own is skipped, never timed.
  if (job.kernel.kind != kernel_kind::aten && uses_cuda_stream(job.kernel.source)) {
    r.flags.push_back("uses_cuda_stream");
    fail_every_input(r, job, {"uses_cuda_stream", "Skipped: uses CUDA stream", ""});
    return;
  }
  step loading;
  loading.text = "loading the kernel";
  loading.setup = true;
  progress(loading);
  auto reference = make_aten_kernel(op);
  // What the kernel could tamper with, seen before it loads (Python started first, so that
  // what importing torch registers is not taken for the kernel's doing).
  at::NoGradGuard no_grad;
  std::optional<dispatcher_fingerprint> dispatcher;
  std::optional<process_state> state;
  if (opts.exploit_checks) {
    bool opinfo = std::any_of(job.correctness_inputs.begin(), job.correctness_inputs.end(),
                              [](const std::string& t) { return is_opinfo_sample(t); });
    if (job.kernel.kind == kernel_kind::py || opinfo) // once a runner: its first Python job's loading
      phases.time("load_kernel", [] { (void)ensure_python(); });
    if (job.kernel.kind == kernel_kind::py)
      python_mark_threads(); // a thread started on import is found after the load
    dispatcher.emplace(relied_on_baseline().with(op));
    state.emplace(opts.device);
    code_baseline();
  }
  std::unique_ptr<kernel> impl;
  call_error load_failure;
  phases.time("load_kernel", [&] {
    try {
      impl = load_kernel(job.kernel, op);
    } catch (const kernel_load_error& e) {
      load_failure = call_error(e.kind, e.what(), "");
    } catch (const python_error& e) {
      load_failure = call_error(e.type, e.what(), e.traceback);
    } catch (const std::exception& e) {
      load_failure = call_error("load_error", e.what(), "");
    }
  });
  if (!impl) {
    // A kernel that rewrote code on import and then failed to load: said too (and the runner
    // ends after this job: bbrunner's spoiled check).
    if (opts.exploit_checks) {
      check_all_code();
      if (!code_finding().empty() && std::find(r.flags.begin(), r.flags.end(), "patches_code") == r.flags.end())
        r.flags.push_back("patches_code");
    }
    // Every input fails with the reason, so the reports list them all.
    fail_every_input(r, job, load_failure);
    r.outcome = outcome::exception;
    r.detail = load_failure.type + ": " + load_failure.message;
    return;
  }
  op_context ctx{job, opts, progress, op, at::Device(opts.device), *reference, *impl, r.flags, phases, {}, nullptr, nullptr, std::nullopt, false, &kernel_called};
  ctx.dispatcher = dispatcher ? &*dispatcher : nullptr;
  ctx.state = state ? &*state : nullptr;
  check_tampering(ctx, true); // what loading the kernel changed (a detour set up on import too)
  // A thread started on import runs beside every timed call, the reference's included (work
  // on the GPU that contends with them, cores kept busy): the same finding as a thread left
  // running by a call.
  if (opts.exploit_checks && python_kernel_of(ctx))
    if (auto threads = python_new_threads(); !threads.empty())
      set_tampered(ctx, "leaves_thread_running",
                   "a thread the kernel started on import (" + threads.front()
                     + ") was still running after it loaded: work beside the timed calls is not measured, "
                       "and slows whatever runs beside it");
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
    for (size_t i = 0; i < n && !ctx.tampered && !lost_context_in_last(r); ++i) {
      r.correctness.push_back(check_input(ctx, job.correctness_inputs[i], i, n));
      used(job.correctness_inputs[i]);
      r.performance.push_back(time_input(ctx, job.performance_inputs[i], i, m));
      mark_timed_failure(r, r.performance.back());
      used(job.performance_inputs[i]);
      stream_input(ctx, i, &r.correctness.back(), &r.performance.back());
    }
  } else {
    for (size_t i = 0; i < n && !ctx.tampered && !lost_context_in_last(r); ++i) {
      r.correctness.push_back(check_input(ctx, job.correctness_inputs[i], i, n));
      used(job.correctness_inputs[i]);
      stream_input(ctx, i, &r.correctness.back(), nullptr);
    }
    for (size_t i = 0; i < m && !ctx.tampered && !lost_context_in_last(r); ++i) {
      r.performance.push_back(time_input(ctx, job.performance_inputs[i], i, m));
      mark_timed_failure(r, r.performance.back());
      used(job.performance_inputs[i]);
      stream_input(ctx, i, nullptr, &r.performance.back());
    }
  }
  // The timer and the comparison are C++ and out of reach, but a kernel that tampered with
  // what an evaluation relies on is not to be trusted on any input.
  if (any_cuda_error(r)) {
    // The device is gone for this process: nothing more to check on it.
    lost_context(r, job, "not run: the CUDA context was lost on an earlier input");
    return;
  }
  check_tampering(ctx, true);
  if (ctx.tampered)
    fail_every_input(r, job, *ctx.tampered);
}

} // namespace

eval_result evaluate_job(const eval_job& job, const runner_options& opts, const progress_fn& progress) {
  auto start = clock::now();
  auto r = result_for(job, describe(opts));
  phase_clock phases;
  bool kernel_called = false;
  try {
    run_job(r, job, opts, progress, phases, kernel_called);
  } catch (const c10::Error& e) {
    // A lost CUDA context that surfaced in the runner's own code after the kernel was called
    // (a fault is sticky, reported by whatever touches the device next): the job's. Before
    // that (a device fault, a busy GPU) it is the runner's, retried on a fresh one.
    if (classify("", e.what_without_backtrace()) != outcome::cuda_error)
      infra_failure(r, job, e.what_without_backtrace());
    else if (!kernel_called)
      infra_failure(r, job, lost_device_detail + std::string(e.what_without_backtrace()));
    else
      lost_context(r, job, e.what_without_backtrace());
  } catch (const std::exception& e) {
    infra_failure(r, job, e.what());
  }
  r.phases = std::move(phases.seconds);
  r.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  return r;
}

} // namespace bb::runner
