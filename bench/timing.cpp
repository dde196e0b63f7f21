// Timing fidelity (GPU): for aten operators on inputs from the shared traces, the time of
// bbcluster's C++ do_bench against triton.testing.do_bench called from Python on the very same
// tensors, side by side in one run. Prints the ratio per op, the median absolute log ratio,
// and each timer's wall time per input.
//
//   bench_timing [TRACE_FILE] [INPUTS_PER_OP]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "suite/args.hpp"
#include "suite/ops.hpp"
#include "suite/traces.hpp"
#include "runner/inputs.hpp"
#include "runner/kernel.hpp"
#include "runner/python_kernel.hpp"
#include "runner/timing.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// A Python module whose entry times the op with Triton's do_bench and returns the mean (ms).
std::string write_do_bench_module(const std::string& dir, const std::string& op_name) {
  auto name = bb::ops::to_schema_name(op_name);
  auto base = name.name.substr(6);
  auto overload = name.overload.empty() ? "default" : name.overload;
  auto path = dir + "/do_bench_" + bb::ops::op_name_to_folder_name(op_name) + ".py";
  std::ofstream(path) << "import torch\nimport triton\n\nOP = torch.ops.aten." << base << "."
                      << overload
                      << "\n\n\ndef bench(*args, **kwargs):\n"
                         "    ms = triton.testing.do_bench(lambda: OP(*args, **kwargs))\n"
                         "    return torch.tensor(ms, dtype=torch.float64)\n";
  return path;
}

} // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : BB_TRACES_DIR "/hf_train";
  size_t per_op = argc > 2 ? std::stoul(argv[2]) : 2;
  const std::vector<std::string> sample = {
    "aten.relu.default",      "aten.add.Tensor",         "aten.mul.Tensor",
    "aten.mm.default",        "aten.bmm.default",        "aten._softmax.default",
    "aten.sum.dim_IntList",   "aten.gelu.default",       "aten.native_layer_norm.default",
    "aten.div.Tensor",        "aten.tanh.default",       "aten.addmm.default"};
  if (!bb::runner::built_with_cuda()) {
    std::fprintf(stderr, "bench_timing: this build has no CUDA\n");
    return 1;
  }
  if (auto why = bb::runner::ensure_python(); !why.empty()) {
    std::fprintf(stderr, "bench_timing: %s\n", why.c_str());
    return 1;
  }
  auto report = bb::traces::load(path);
  bb::traces::keep_largest(report.loaded, per_op);
  auto dir = std::filesystem::temp_directory_path() / "bench_timing";
  std::filesystem::create_directories(dir);
  bb::runner_options timer;
  timer.device = "cuda";
  timer.rounds = 1; // one do_bench measurement, as triton's
  std::vector<double> log_ratios;
  double ours_wall = 0, theirs_wall = 0;
  size_t inputs = 0;
  std::printf("%-32s %12s %12s %8s\n", "operator / input", "ours (ms)", "do_bench", "ratio");
  for (auto& op : report.loaded.ops) {
    if (std::find(sample.begin(), sample.end(), op.op_name) == sample.end())
      continue;
    auto name = bb::ops::to_schema_name(op.op_name);
    auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
    if (!handle)
      continue;
    auto reference = bb::runner::make_aten_kernel(*handle);
    auto python = bb::runner::python_kernel::load(write_do_bench_module(dir.string(), op.op_name), "bench");
    for (auto& text : op.correctness) try {
      auto parsed = bb::args::parse_call(text);
      auto call = bb::runner::build_call(std::get<bb::args::call>(parsed), handle->schema(),
                                         bb::runner::input_seed(op.op_name, text), at::Device(at::kCUDA));
      auto in = bb::runner::prepare(call, handle->schema(), reference.get());
      auto t0 = clock_type::now();
      double ours = bb::runner::time_ms([&] { reference->call(in); }, timer);
      ours_wall += seconds_since(t0);
      std::vector<c10::IValue> args;
      for (auto& a : call.args)
        args.push_back(bb::runner::clone_value(a));
      std::unordered_map<std::string, c10::IValue> kwargs;
      for (auto& [k, v] : call.kwargs)
        kwargs.emplace(k, bb::runner::clone_value(v));
      auto t1 = clock_type::now();
      double theirs = python->call(args, kwargs, handle->schema()).toTensor().item<double>();
      theirs_wall += seconds_since(t1);
      double ratio = ours / theirs;
      log_ratios.push_back(std::fabs(std::log(ratio)));
      ++inputs;
      std::printf("%-32s %12.4f %12.4f %8.3f\n", op.op_name.c_str(), ours, theirs, ratio);
    } catch (const std::exception& e) {
      std::printf("%-32s skipped: %.80s\n", op.op_name.c_str(), e.what());
    }
  }
  if (log_ratios.empty()) {
    std::fprintf(stderr, "bench_timing: no sampled operator in %s\n", path.c_str());
    return 1;
  }
  std::sort(log_ratios.begin(), log_ratios.end());
  double median = log_ratios[log_ratios.size() / 2];
  std::printf("median |log(ours / do_bench)| over %zu inputs: %.4f (%.2f%%)\n", inputs, median,
              100.0 * (std::exp(median) - 1.0));
  std::printf("wall time per input: ours %.3f s, do_bench %.3f s, ratio %.3f\n", ours_wall / inputs,
              theirs_wall / inputs, ours_wall / theirs_wall);
  return 0;
}
