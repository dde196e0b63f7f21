#include "runner/runner.hpp"

#include <functional>
#include <limits>
#include <sstream>

#include <malloc.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>

#ifdef BB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "suite/args.hpp"
#include "suite/ops.hpp"
#include "runner/inputs.hpp"
#include "runner/timing.hpp"

namespace bb::runner {

void apply_options(const runner_options& opts) {
  if (opts.device == "cpu" && opts.cpu_threads > 0)
    at::set_num_threads(static_cast<int>(opts.cpu_threads));
  // A steady heap: glibc's defaults give freed memory back to the system once the free top of
  // the heap passes a threshold that moves with the sizes seen, so that now and then one timed
  // call's output comes from fresh pages (a page fault per 4 KiB: 1 ms for a 4 MiB output,
  // five times relu's own time) on whichever side it falls. Blocks up to glibc's largest
  // dynamic threshold come from the heap, and the heap is never trimmed (a runner lives for a
  // sweep, not longer).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

provenance describe(const runner_options& opts) {
  provenance p;
  p.node = opts.node;
  p.device = opts.device;
  p.driver = "none";
  p.torch_version = TORCH_VERSION;
#ifdef BB_WITH_CUDA
  if (opts.device == "cuda") {
    try {
      cudaDeviceProp props{};
      if (cudaGetDeviceProperties(&props, 0) == cudaSuccess)
        p.device = std::string("cuda: ") + props.name;
      int driver = 0;
      if (cudaDriverGetVersion(&driver) == cudaSuccess)
        p.driver = "cuda " + std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10);
    } catch (...) {
      // Provenance is best effort; the job's own errors say what is wrong.
    }
  }
#endif
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
                           const runner_options& opts) {
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

std::string check_device(const runner_options& opts) {
  try {
    auto x = at::ones({1 << 16}, at::TensorOptions().device(at::Device(opts.device)));
    auto sum = (x * 2).sum().item<double>();
    synchronize(opts.device);
    if (sum != 2.0 * (1 << 16))
      return "the device computed a wrong sum";
    return "";
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
}

} // namespace bb::runner
