#include "runner/timing.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#ifdef BB_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace bb::runner {

double cpu_bench_ms(const std::function<void()>& fn, const timer_options& opts) {
  using clock = std::chrono::steady_clock;
  auto over = [&](clock::time_point since, double share) {
    return opts.cpu_max_seconds > 0
           && std::chrono::duration<double>(clock::now() - since).count() > opts.cpu_max_seconds * share;
  };
  auto warm_start = clock::now();
  for (int64_t i = 0; i < opts.cpu_warmup; ++i) {
    fn();
    if (over(warm_start, 0.25))
      break;
  }
  auto start = clock::now();
  int64_t done = 0;
  while (done < opts.cpu_runs) {
    fn();
    ++done;
    if (over(start, 1.0))
      break;
  }
  std::chrono::duration<double, std::milli> total = clock::now() - start;
  return total.count() / static_cast<double>(std::max<int64_t>(1, done));
}

bool built_with_cuda() {
#ifdef BB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void synchronize(const std::string& device) {
#ifdef BB_WITH_CUDA
  if (device == "cuda")
    c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

double cuda_bench_ms(const std::function<void()>& fn, const timer_options& opts) {
#ifdef BB_WITH_CUDA
  fn();
  c10::cuda::device_synchronize();
  auto cache = at::empty({opts.flush_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record();
  for (int i = 0; i < 5; ++i) {
    cache.zero_();
    fn();
  }
  end.record();
  end.synchronize();
  double estimate_ms = std::max(1e-6, static_cast<double>(start.elapsed_time(end)) / 5.0);
  auto n_warmup = std::max<int64_t>(1, static_cast<int64_t>(opts.gpu_warmup_ms / estimate_ms));
  auto n_repeat = std::max<int64_t>(1, static_cast<int64_t>(opts.gpu_rep_ms / estimate_ms));
  std::vector<at::cuda::CUDAEvent> starts, ends;
  starts.reserve(static_cast<size_t>(n_repeat));
  ends.reserve(static_cast<size_t>(n_repeat));
  for (int64_t i = 0; i < n_repeat; ++i) {
    starts.emplace_back(cudaEventDefault);
    ends.emplace_back(cudaEventDefault);
  }
  for (int64_t i = 0; i < n_warmup; ++i)
    fn();
  for (int64_t i = 0; i < n_repeat; ++i) {
    // The flush is outside the event pair: only the call is timed.
    cache.zero_();
    starts[static_cast<size_t>(i)].record();
    fn();
    ends[static_cast<size_t>(i)].record();
  }
  c10::cuda::device_synchronize();
  double total = 0.0;
  for (int64_t i = 0; i < n_repeat; ++i)
    total += starts[static_cast<size_t>(i)].elapsed_time(ends[static_cast<size_t>(i)]);
  return total / static_cast<double>(n_repeat);
#else
  (void)fn;
  (void)opts;
  throw std::runtime_error("this bbrunner was built without CUDA");
#endif
}

double time_ms(const std::function<void()>& fn, const timer_options& opts) {
  return opts.device == "cuda" ? cuda_bench_ms(fn, opts) : cpu_bench_ms(fn, opts);
}

} // namespace bb::runner
