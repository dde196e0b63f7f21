#include "runner/runner.hpp"

#include <chrono>
#include <functional>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include "core/args.hpp"
#include "core/ops.hpp"
#include "runner/compare.hpp"
#include "runner/inputs.hpp"
#include "runner/kernel.hpp"
#include "runner/native_kernel.hpp"
#include "runner/python_kernel.hpp"

namespace bb::runner {

namespace {

using clock = std::chrono::steady_clock;

// A failure of one call, as the record fields want it.
struct call_error {
  std::string type;
  std::string message;
  std::string traceback;
};

template <class F>
std::optional<call_error> guarded(F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (const c10::OutOfMemoryError& e) {
    return call_error{"oom", e.what_without_backtrace(), e.what()};
  } catch (const python_error& e) {
    return call_error{e.type, e.what(), e.traceback};
  } catch (const c10::Error& e) {
    return call_error{"exception", e.what_without_backtrace(), e.what()};
  } catch (const std::exception& e) {
    return call_error{"exception", e.what(), ""};
  }
}

// BackendBench's cpu_bench: warm-up calls, then the mean of timed calls, in milliseconds.
// With a budget, warm-up stops after a quarter of it and timing after all of it (a large
// input on a small CPU would otherwise take hours); at least one call each.
double cpu_bench_ms(const std::function<void()>& fn, int64_t warmup, int64_t runs,
                    double max_seconds) {
  using seconds = std::chrono::duration<double>;
  auto over = [&](clock::time_point since, double share) {
    return max_seconds > 0 && seconds(clock::now() - since).count() > max_seconds * share;
  };
  auto warm_start = clock::now();
  for (int64_t i = 0; i < warmup; ++i) {
    fn();
    if (over(warm_start, 0.25))
      break;
  }
  auto start = clock::now();
  int64_t done = 0;
  while (done < runs) {
    fn();
    ++done;
    if (over(start, 1.0))
      break;
  }
  std::chrono::duration<double, std::milli> total = clock::now() - start;
  return total.count() / static_cast<double>(done);
}

struct op_context {
  const eval_job& job;
  const options& opts;
  c10::OperatorHandle op;
  at::Device device;
  const kernel& reference;
  const kernel& impl;
};

std::optional<built_call> build(const op_context& ctx, const std::string& text, call_error& err) {
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
    err.type = failure->message.rfind("unsupported", 0) == 0 ? "unsupported" : "reference_error";
  }
  return out;
}

// Runs the reference and the kernel on fresh clones; fills `ref` and `res`.
std::optional<call_error> run_both(const op_context& ctx, const built_call& call, c10::IValue& ref,
                                   c10::IValue& res) {
  if (auto e = guarded([&] {
        auto in = prepare(call, ctx.op.schema(), &ctx.reference);
        ref = ctx.reference.call(in);
      })) {
    e->type = "reference_error";
    return e;
  }
  return guarded([&] {
    auto in = prepare(call, ctx.op.schema(), &ctx.impl);
    res = ctx.impl.call(in);
  });
}

correctness_record check_input(const op_context& ctx, const std::string& text) {
  correctness_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  call_error err;
  auto call = build(ctx, text, err);
  c10::IValue ref, res;
  if (call) {
    if (auto e = run_both(ctx, *call, ref, res))
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

performance_record time_input(const op_context& ctx, const std::string& text) {
  performance_record rec;
  rec.op_name = ctx.job.op_name;
  rec.args = args::serialize_text(text);
  rec.speedup = 1.0;
  call_error err;
  auto call = build(ctx, text, err);
  if (!call) {
    rec.error_msg = err.type + ": " + err.message;
    return rec;
  }
  // As BackendBench: each side is timed on one set of inputs, reused call after call.
  auto timed = [&](const kernel& k) {
    auto in = prepare(*call, ctx.op.schema(), &k);
    return cpu_bench_ms([&] { k.call(in); }, ctx.opts.cpu_warmup, ctx.opts.cpu_runs,
                        ctx.opts.cpu_max_seconds);
  };
  if (auto e = guarded([&] { rec.reference_time_ms = timed(ctx.reference); })) {
    rec.error_msg = "reference_error: " + e->message;
    return rec;
  }
  c10::IValue ref, res;
  if (auto e = run_both(ctx, *call, ref, res)) {
    rec.error_msg = e->type + ": " + e->message;
    return rec;
  }
  auto cmp = compare(ref, res, ctx.opts.atol, ctx.opts.rtol);
  if (!cmp.ok) {
    rec.error_msg = "incorrect: " + cmp.message;
    return rec;
  }
  if (auto e = guarded([&] { rec.benchmark_time_ms = timed(ctx.impl); })) {
    rec.error_msg = e->type + ": " + e->message;
    return rec;
  }
  rec.successfully_ran = true;
  rec.speedup = rec.benchmark_time_ms > 0 ? rec.reference_time_ms / rec.benchmark_time_ms : 1.0;
  return rec;
}

void fail_every_input(eval_result& r, const eval_job& job, const call_error& why) {
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

} // namespace

provenance describe(const options& opts) {
  provenance p;
  p.node = opts.node;
  p.device = opts.device == "cpu" ? "cpu" : opts.device;
  p.driver = "none";
  p.torch_version = TORCH_VERSION;
  return p;
}

std::string resolve_schema(const std::string& op_name) {
  auto name = ops::to_schema_name(op_name);
  auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!handle)
    return "";
  std::ostringstream out;
  out << handle->schema();
  return out.str();
}

std::string describe_input(const std::string& op_name, const std::string& call_text,
                           const options& opts) {
  auto name = ops::to_schema_name(op_name);
  auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
  if (!handle)
    return "unsupported op: " + op_name + " is not in torch " TORCH_VERSION "\n";
  auto parsed = args::parse_call(call_text);
  if (auto* e = std::get_if<args::parse_error>(&parsed))
    return "cannot parse input: " + args::to_string(*e) + "\n";
  std::ostringstream out;
  try {
    auto call = build_call(std::get<args::call>(parsed), handle->schema(),
                           input_seed(op_name, call_text), at::Device(opts.device));
    std::function<void(const c10::IValue&, const std::string&)> show =
      [&](const c10::IValue& v, const std::string& where) {
        if (v.isTensor()) {
          auto t = v.toTensor();
          out << where << ": sizes " << t.sizes() << " strides " << t.strides() << " "
              << t.scalar_type() << " sum "
              << (t.numel() ? t.to(at::kDouble).abs().sum().item<double>() : 0.0) << "\n";
        } else if (v.isList()) {
          auto list = v.toListRef();
          for (size_t i = 0; i < list.size(); ++i)
            show(list[i], where + "[" + std::to_string(i) + "]");
        } else {
          out << where << ": " << v << "\n";
        }
      };
    for (size_t i = 0; i < call.args.size(); ++i)
      show(call.args[i], "arg " + std::to_string(i));
    for (auto& [k, v] : call.kwargs)
      show(v, "kwarg " + k);
  } catch (const c10::Error& e) {
    out << "cannot build input: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    out << "cannot build input: " << e.what() << "\n";
  }
  return out.str();
}

eval_result evaluate_job(const eval_job& job, const options& opts) {
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
  op_context ctx{job, opts, op, at::Device(opts.device == "cpu" ? "cpu" : "cuda"), *reference, *impl};
  at::NoGradGuard no_grad;
  for (auto& text : job.correctness_inputs)
    r.correctness.push_back(check_input(ctx, text));
  for (auto& text : job.performance_inputs)
    r.performance.push_back(time_input(ctx, text));
  return finish("ok", "");
}

} // namespace bb::runner
