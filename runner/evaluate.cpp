#include "runner/runner.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "suite/args.hpp"
#include "suite/ops.hpp"
#include "runner/compare.hpp"
#include "runner/honesty.hpp"
#include "runner/inputs.hpp"
#include "runner/kernel.hpp"
#include "runner/native_kernel.hpp"
#include "runner/opinfo.hpp"
#include "runner/python_kernel.hpp"
#include "runner/timing.hpp"

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

template <class F>
std::optional<call_error> guarded(F&& f) {
  try {
    f();
    return std::nullopt;
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

struct op_context {
  const eval_job& job;
  const options& opts;
  const progress_fn& progress;
  c10::OperatorHandle op;
  at::Device device;
  const kernel& reference;
  const kernel& impl;
  timer_options timer;
  /// Honesty flags raised so far (each fails its input).
  std::vector<std::string>& flags;
};

void raise_flag(const op_context& ctx, const std::string& flag) {
  if (std::find(ctx.flags.begin(), ctx.flags.end(), flag) == ctx.flags.end())
    ctx.flags.push_back(flag);
}

std::optional<built_call> build(const op_context& ctx, const std::string& text, call_error& err) {
  if (is_opinfo_sample(text)) {
    std::optional<built_call> sample;
    if (auto failure = guarded([&] { sample = build_opinfo_sample(text, ctx.op.schema(), ctx.device); }))
      err = {failure->type == "cuda_error" ? failure->type : "reference_error", failure->message,
             failure->traceback};
    return sample;
  }
  auto parsed = args::parse_call(text);
  if (auto* e = std::get_if<args::parse_error>(&parsed)) {
    err = {"bad_input", "cannot parse input: " + args::to_string(*e), ""};
    return std::nullopt;
  }
  std::optional<built_call> out;
  if (auto failure = guarded([&] {
        out = build_call(std::get<args::call>(parsed), ctx.op.schema(),
                         input_seed(ctx.job.op_name, text), ctx.device);
      })) {
    err = *failure;
    if (err.type != "cuda_error")
      err.type = failure->message.rfind("unsupported", 0) == 0 ? "unsupported" : "reference_error";
  }
  return out;
}

// Runs the reference and the kernel on fresh clones, then the honesty checks on the kernel's
// call; fills `ref` and `res`.
std::optional<call_error> run_both(const op_context& ctx, const built_call& call,
                                   const std::string& step, c10::IValue& ref, c10::IValue& res) {
  ctx.progress(step + ": reference", false);
  if (auto e = guarded([&] {
        auto in = prepare(call, ctx.op.schema(), &ctx.reference);
        ref = ctx.reference.call(in);
        synchronize(ctx.opts.device);
      })) {
    if (e->type != "cuda_error")
      e->type = "reference_error";
    return e;
  }
  ctx.progress(step + ": kernel", false);
  prepared_input in;
  if (auto e = guarded([&] {
        in = prepare(call, ctx.op.schema(), &ctx.impl);
        res = ctx.impl.call(in);
        synchronize(ctx.opts.device);
      }))
    return e;
  if (auto what = changed_input(call, in, ctx.op.schema(), ctx.impl.takes_call_args()); !what.empty()) {
    raise_flag(ctx, "mutates_input");
    return call_error{"mutates_input", what, ""};
  }
  if (auto what = aliased_input(res, in, ctx.op.schema()); !what.empty()) {
    raise_flag(ctx, "aliases_input");
    return call_error{"aliases_input", what, ""};
  }
  return std::nullopt;
}

correctness_record check_input(const op_context& ctx, const std::string& text, size_t i, size_t n) {
  correctness_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  auto step = "correctness input " + std::to_string(i + 1) + "/" + std::to_string(n);
  ctx.progress(step + ": building inputs", false);
  call_error err;
  auto call = build(ctx, text, err);
  c10::IValue ref, res;
  if (call) {
    if (auto e = run_both(ctx, *call, step, ref, res))
      err = *e;
  }
  if (!err.type.empty()) {
    rec.error_type = err.type;
    rec.error_msg = err.message;
    rec.traceback = err.traceback;
    return rec;
  }
  auto cmp = compare(ref, res, ctx.opts.atol, ctx.opts.rtol);
  rec.is_correct = cmp.ok;
  rec.max_abs_error = cmp.max_abs_error;
  rec.max_rel_error = cmp.max_rel_error;
  if (!cmp.ok) {
    rec.error_type = "incorrect";
    rec.error_msg = cmp.message;
  }
  return rec;
}

performance_record time_input(const op_context& ctx, const std::string& text, size_t i, size_t n) {
  performance_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  rec.speedup = 1.0;
  auto step = "performance input " + std::to_string(i + 1) + "/" + std::to_string(n);
  ctx.progress(step + ": building inputs", false);
  call_error err;
  auto call = build(ctx, text, err);
  if (!call) {
    rec.error_msg = err.type + ": " + err.message;
    return rec;
  }
  // As BackendBench: each side is timed on one set of inputs, reused call after call.
  auto timed = [&](const kernel& k) {
    auto in = prepare(*call, ctx.op.schema(), &k);
    return time_ms([&] { k.call(in); }, ctx.timer);
  };
  ctx.progress(step + ": timing the reference", false);
  if (auto e = guarded([&] { rec.reference_time_ms = timed(ctx.reference); })) {
    rec.error_msg = (e->type == "cuda_error" ? "cuda_error: " : "reference_error: ") + e->message;
    return rec;
  }
  c10::IValue ref, res;
  if (auto e = run_both(ctx, *call, step, ref, res)) {
    rec.error_msg = e->type + ": " + e->message;
    return rec;
  }
  auto cmp = compare(ref, res, ctx.opts.atol, ctx.opts.rtol);
  if (!cmp.ok) {
    rec.error_msg = "incorrect: " + cmp.message;
    return rec;
  }
  ctx.progress(step + ": timing the kernel", false);
  if (auto e = guarded([&] { rec.benchmark_time_ms = timed(ctx.impl); })) {
    rec.error_msg = e->type + ": " + e->message;
    return rec;
  }
  rec.successfully_ran = true;
  rec.speedup = rec.benchmark_time_ms > 0 ? rec.reference_time_ms / rec.benchmark_time_ms : 1.0;
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

} // namespace

eval_result evaluate_job(const eval_job& job, const options& opts, const progress_fn& progress) {
  auto start = clock::now();
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  r.where = describe(opts);
  r.where.artefact_hash = job.kernel.hash;
  auto finish = [&](std::string outcome_text, std::string detail) {
    r.outcome = std::move(outcome_text);
    r.detail = std::move(detail);
    r.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
    return r;
  };
  auto name = ops::to_schema_name(job.op_name);
  auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!handle)
    return finish("unsupported", "unsupported op: " + job.op_name + " is not in torch " TORCH_VERSION);
  c10::OperatorHandle op = *handle;
  // As BackendBench: a kernel that works on a stream of its own is skipped, never timed.
  if (job.kernel.kind != "aten" && uses_cuda_stream(job.kernel.source)) {
    r.flags.push_back("uses_cuda_stream");
    fail_every_input(r, job, {"uses_cuda_stream", "Skipped: uses CUDA stream", ""});
    return finish("ok", "");
  }
  progress("loading the kernel", true);
  auto reference = make_aten_kernel(op);
  std::unique_ptr<kernel> impl;
  call_error load_failure;
  try {
    impl = load_kernel(job.kernel, op);
  } catch (const kernel_load_error& e) {
    load_failure = {e.kind, e.what(), ""};
  } catch (const python_error& e) {
    load_failure = {e.type, e.what(), e.traceback};
  } catch (const std::exception& e) {
    load_failure = {"load_error", e.what(), ""};
  }
  if (!impl) {
    // Every input fails with the reason, so the reports list them all.
    fail_every_input(r, job, load_failure);
    return finish("exception", load_failure.type + ": " + load_failure.message);
  }
  timer_options timer;
  timer.device = opts.device;
  timer.cpu_warmup = opts.cpu_warmup;
  timer.cpu_runs = opts.cpu_runs;
  timer.cpu_max_seconds = opts.cpu_max_seconds;
  timer.gpu_warmup_ms = opts.gpu_warmup_ms;
  timer.gpu_rep_ms = opts.gpu_rep_ms;
  timer.flush_bytes = opts.flush_bytes;
  op_context ctx{job,      opts,       progress, op,    at::Device(opts.device),
                 *reference, *impl, timer,    r.flags};
  at::NoGradGuard no_grad;
  auto n = job.correctness_inputs.size();
  for (size_t i = 0; i < n; ++i)
    r.correctness.push_back(check_input(ctx, job.correctness_inputs[i], i, n));
  if (python_timers_tampered()) {
    // The timer is C++ and out of reach, but such a kernel is not to be trusted.
    r.flags.push_back("replaces_timer");
    fail_every_input(r, job, {"replaces_timer", "the kernel replaced a timing function", ""});
    return finish("ok", "");
  }
  auto m = job.performance_inputs.size();
  for (size_t i = 0; i < m; ++i)
    r.performance.push_back(time_input(ctx, job.performance_inputs[i], i, m));
  if (python_timers_tampered()) {
    r.flags.push_back("replaces_timer");
    fail_every_input(r, job, {"replaces_timer", "the kernel replaced a timing function", ""});
  }
  if (any_cuda_error(r))
    return finish("cuda_error", "the CUDA context was lost; the runner is replaced");
  return finish("ok", "");
}

} // namespace bb::runner
