#pragma once

// The timers, in bbrunner's C++ code where kernel code cannot reach them: BackendBench's
// cpu_bench on the CPU, triton.testing.do_bench's procedure on CUDA.

#include <cstdint>
#include <functional>
#include <string>

namespace bb::runner {

struct timer_options {
  /// "cpu" or "cuda".
  std::string device = "cpu";
  // cpu_bench: warm-up calls, timed calls, and a budget per measurement (0: none).
  int64_t cpu_warmup = 10;
  int64_t cpu_runs = 100;
  double cpu_max_seconds = 0.0;
  // do_bench: warm-up and repetition budgets in ms of estimated time, the cache flush buffer.
  double gpu_warmup_ms = 25.0;
  double gpu_rep_ms = 100.0;
  int64_t flush_bytes = int64_t{256} << 20;
};

/// cpu_bench: the mean of timed calls after warm-up calls, in milliseconds. With a budget,
/// warm-up stops after a quarter of it and timing after all of it; at least one call each.
double cpu_bench_ms(const std::function<void()>& fn, const timer_options& opts);

/// do_bench: one call; five calls timed together (cache flushed before each) for an estimate;
/// warm-up calls for gpu_warmup_ms and timed calls for gpu_rep_ms of estimated time (at least
/// one each); the flush buffer zeroed before every timed call, outside its event pair; the
/// mean of the per-call CUDA event times, in milliseconds. Throws when built without CUDA.
double cuda_bench_ms(const std::function<void()>& fn, const timer_options& opts);

/// The timer for opts.device.
double time_ms(const std::function<void()>& fn, const timer_options& opts);

/// Waits for the device's queued work (nothing on the CPU).
void synchronize(const std::string& device);

/// Whether this bbrunner was built with CUDA.
bool built_with_cuda();

} // namespace bb::runner
