// Input pipeline benchmark: parses BackendBench's whole included torchbench set and builds
// every input's tensors for a sample of operators, as a runner does before evaluating.
//
//   bench_inputs [TRACE_FILE] [OPS...]
//
// Prints parse throughput (lines per second) and build cost (milliseconds per input, and per
// MiB of tensor data), each measured side by side in this one run.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "suite/args.hpp"
#include "suite/ops.hpp"
#include "suite/traces.hpp"
#include "runner/inputs.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

} // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1]
                              : BB_TRACES_DIR "/backendbench/backend_bench_problems_included.txt";
  std::vector<std::string> sample;
  for (int i = 2; i < argc; ++i)
    sample.push_back(argv[i]);
  if (sample.empty())
    sample = {"aten.relu.default", "aten.add.Tensor", "aten.mm.default", "aten.sum.dim_IntList",
              "aten._softmax.default", "aten.cat.default", "aten.native_layer_norm.default",
              "aten.convolution.default", "aten.where.self", "aten.clone.default"};

  auto start = clock_type::now();
  auto report = bb::traces::load(path);
  auto parse_s = seconds_since(start);
  if (!report.fatal.empty()) {
    std::fprintf(stderr, "bench_inputs: %s\n", report.fatal.c_str());
    return 1;
  }
  size_t inputs = 0;
  for (auto& op : report.loaded.ops)
    inputs += op.correctness.size();
  std::printf("parse: %zu lines (%zu distinct inputs, %zu ops) in %.3f s: %.0f lines/s, %.1f us/line\n",
              report.lines, inputs, report.loaded.ops.size(), parse_s, report.lines / parse_s,
              1e6 * parse_s / static_cast<double>(report.lines));

  size_t built = 0, failed = 0;
  double bytes = 0, build_s = 0;
  for (auto& op : report.loaded.ops) {
    if (std::find(sample.begin(), sample.end(), op.op_name) == sample.end())
      continue;
    auto name = bb::ops::to_schema_name(op.op_name);
    auto handle = c10::Dispatcher::singleton().findSchema({name.name, name.overload});
    if (!handle)
      continue;
    size_t op_built = 0;
    double op_s = 0;
    for (auto& text : op.correctness) {
      auto parsed = bb::args::parse_call(text);
      auto& c = std::get<bb::args::call>(parsed);
      auto t0 = clock_type::now();
      try {
        auto call = bb::runner::build_call(c, handle->schema(), bb::runner::input_seed(op.op_name, text),
                                           at::Device(at::kCPU));
        op_s += seconds_since(t0);
        bytes += static_cast<double>(bb::args::total_tensor_bytes(c));
        ++op_built;
      } catch (const std::exception&) {
        ++failed;
      }
    }
    std::printf("  %-34s %4zu inputs  %8.3f ms/input\n", op.op_name.c_str(), op_built,
                op_built ? 1e3 * op_s / static_cast<double>(op_built) : 0.0);
    built += op_built;
    build_s += op_s;
  }
  std::printf("build: %zu inputs (%zu failed) of %zu sampled ops in %.3f s: %.3f ms/input, %.3f ms/MiB\n",
              built, failed, sample.size(), build_s, built ? 1e3 * build_s / static_cast<double>(built) : 0.0,
              bytes > 0 ? 1e3 * build_s / (bytes / (1 << 20)) : 0.0);
  std::printf("ratio: building one input costs %.0fx parsing its line\n",
              built ? (build_s / static_cast<double>(built)) / (parse_s / static_cast<double>(report.lines)) : 0.0);
  return 0;
}
