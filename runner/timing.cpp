#include "runner/timing.hpp"

#include "runner/code_guard.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>

#include <sys/resource.h>

#include <ATen/ATen.h>

#ifdef BB_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "runner/stream_watch.hpp"

namespace bb::runner {

namespace {

using clock = std::chrono::steady_clock;

// How the reference is timed: in full; calibrated, with a cached figure (`share` of a full
// timing's calls and warm-up, so that the speedup is of two figures measured now); or not at
// all, the cached figure standing (time_ms's kernel alone).
struct reference_plan {
  const side_timing* cached = nullptr;
  double share = 1.0;
  bool skip = false;
};

// A calibration's calls out of a full timing's `full`: `share` of them, at least one a round.
int64_t share_of(int64_t full, double share, int64_t rounds) {
  if (share >= 1.0)
    return full;
  auto calls = static_cast<int64_t>(std::ceil(share * static_cast<double>(full)));
  return std::clamp<int64_t>(calls, std::min(full, std::max<int64_t>(1, rounds)), full);
}

// A time read through the clock, once the code the clock runs through is checked (a kernel's
// detour of it is then found before the time is used: code_guard.hpp).
double ms_since(clock::time_point start) {
  double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  check_timing_code();
  return ms;
}

// The two-sided 97.5% quantile of Student's t with `df` degrees of freedom.
double t_quantile(int64_t df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
                                 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101,
                                 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052,
                                 2.048, 2.045, 2.042};
  if (df < 1)
    return 0.0;
  if (df <= 30)
    return table[df - 1];
  return 1.96 + 2.4 / static_cast<double>(df);
}

// The calls of a round of `n` whose outputs are checked: checked_per_round of them (all of a
// shorter round) drawn at random, from the operating system's entropy, so that no kernel can
// predict them; numbered (ranked) in the round's order.
struct checked_calls {
  std::vector<int64_t> indices; // ascending
  call_point at(int64_t round, int64_t i) const {
    call_point p{round, i, false, true};
    auto it = std::find(indices.begin(), indices.end(), i);
    if (it != indices.end()) {
      p.checked = true;
      p.rank = static_cast<int>(it - indices.begin());
    }
    return p;
  }
};

checked_calls pick_checked(int64_t n) {
  static std::random_device entropy;
  checked_calls c;
  while (static_cast<int64_t>(c.indices.size()) < std::min<int64_t>(n, checked_per_round)) {
    auto i = static_cast<int64_t>(entropy() % static_cast<uint64_t>(n));
    if (std::find(c.indices.begin(), c.indices.end(), i) == c.indices.end())
      c.indices.push_back(i);
  }
  std::sort(c.indices.begin(), c.indices.end());
  return c;
}

// How one side's calls are spread over rounds: `calls` in `rounds` nearly equal shares.
int64_t share(int64_t calls, int64_t rounds, int64_t round) {
  return calls / rounds + (round < calls % rounds ? 1 : 0);
}

void finish_side(side_timing& s, const std::vector<std::vector<double>>& per_round) {
  double total = 0.0;
  int64_t n = 0;
  for (auto& round : per_round) {
    if (round.empty())
      continue;
    double sum = std::accumulate(round.begin(), round.end(), 0.0);
    s.round_means_ms.push_back(sum / static_cast<double>(round.size()));
    total += sum;
    n += static_cast<int64_t>(round.size());
  }
  s.calls = n;
  s.mean_ms = n > 0 ? total / static_cast<double>(n) : 0.0;
}

// Both sides' timings from their calls per round; a skipped reference's cached figure as it is.
paired_timing paired_from_rounds(const reference_plan& plan, const std::vector<std::vector<double>>& ref_rounds,
                                 const std::vector<std::vector<double>>& kernel_rounds) {
  paired_timing out;
  if (plan.skip)
    out.reference = *plan.cached;
  else
    finish_side(out.reference, ref_rounds);
  finish_side(out.kernel, kernel_rounds);
  return out;
}

// --- CPU: BackendBench's cpu_bench, in rounds ---------------------------------------------

// One call of a side: its preparation, the measured call, its clean-up; the call's time.
double run_call(const timed_side& side, const call_point& p) {
  if (side.before)
    side.before(p);
  auto start = clock::now();
  side.call(p);
  double ms = ms_since(start);
  if (side.after)
    side.after(p);
  return ms;
}

// The involuntary context switches of the calling thread so far: the operating system gave
// its core to another thread while it wanted it.
long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}

// One call, as run_call, and whether the operating system preempted the timing thread during
// it (the stricter CPU measurement's).
double run_call_watched(const timed_side& side, const call_point& p, bool& preempted) {
  if (side.before)
    side.before(p);
  long switches = involuntary_switches();
  auto start = clock::now();
  side.call(p);
  double ms = ms_since(start);
  preempted = involuntary_switches() != switches;
  if (side.after)
    side.after(p);
  return ms;
}

// A side's timed calls: `calls` of them, out of the `full` a full timing makes.
struct call_count {
  int64_t full = 1;
  int64_t calls = 1;
};

// Warm-up calls as cpu_bench makes them (stopping after a quarter of the budget), and the
// number of timed calls that fit the budget, judged from the warm-up; a calibration (`share`
// below 1) makes that share of the timed calls, after the same warm-up as the kernel's.
call_count cpu_prime(const timed_side& side, const runner_options& opts, double share = 1.0) {
  auto start = clock::now();
  int64_t done = 0;
  double budget_ms = opts.cpu_max_seconds * 1000.0;
  for (int64_t i = 0; i < std::max<int64_t>(1, opts.cpu_warmup); ++i) {
    run_call(side, {0, i, false, false});
    ++done;
    if (budget_ms > 0 && ms_since(start) > budget_ms * 0.25)
      break;
  }
  call_count n;
  n.full = opts.cpu_runs;
  if (budget_ms > 0) {
    double per_call = ms_since(start) / static_cast<double>(done);
    n.full = std::clamp<int64_t>(static_cast<int64_t>(budget_ms / std::max(per_call, 1e-6)), 1, opts.cpu_runs);
  }
  n.calls = share_of(n.full, share, opts.rounds);
  return n;
}

using side_fn = std::function<void(code_side)>;

void tell(const side_fn& on_side, code_side side) {
  if (on_side)
    on_side(side);
}

paired_timing cpu_pair(const timed_side& reference, const timed_side& kernel,
                       const runner_options& opts, const reference_plan& plan, const side_fn& on_side,
                       bool watch_preemption = false) {
  call_count ref;
  if (!plan.skip) {
    tell(on_side, code_side::reference);
    ref = cpu_prime(reference, opts, plan.share);
  }
  tell(on_side, code_side::kernel);
  int64_t kernel_calls = cpu_prime(kernel, opts).calls;
  int64_t rounds = std::max<int64_t>(1, std::min({opts.rounds, kernel_calls, plan.skip ? kernel_calls : ref.full}));
  std::vector<std::vector<double>> ref_rounds(static_cast<size_t>(rounds));
  std::vector<std::vector<double>> kernel_rounds(static_cast<size_t>(rounds));
  std::vector<std::vector<bool>> ref_preempted(static_cast<size_t>(rounds));
  std::vector<std::vector<bool>> kernel_preempted(static_cast<size_t>(rounds));
  auto run = [&](const timed_side& side, int64_t round, int64_t n, std::vector<double>& out) {
    auto checked = pick_checked(n);
    auto& marks = (&side == &reference ? ref_preempted : kernel_preempted)[static_cast<size_t>(round)];
    for (int64_t i = 0; i < n; ++i) {
      bool preempted = false;
      out.push_back(watch_preemption ? run_call_watched(side, checked.at(round, i), preempted)
                                     : run_call(side, checked.at(round, i)));
      marks.push_back(preempted);
    }
  };
  for (int64_t r = 0; r < rounds; ++r) {
    // Odd rounds time the kernel first: the order cancels out over the rounds.
    for (int turn = 0; turn < 2; ++turn) {
      bool ref_turn = (turn == 0) == (r % 2 == 0);
      if (ref_turn && !plan.skip) {
        tell(on_side, code_side::reference);
        run(reference, r, share(ref.calls, rounds, r), ref_rounds[static_cast<size_t>(r)]);
      } else if (!ref_turn) {
        tell(on_side, code_side::kernel);
        run(kernel, r, share(kernel_calls, rounds, r), kernel_rounds[static_cast<size_t>(r)]);
      }
    }
  }
  if (watch_preemption) {
    drop_preempted(ref_rounds, ref_preempted);
    drop_preempted(kernel_rounds, kernel_preempted);
  }
  return paired_from_rounds(plan, ref_rounds, kernel_rounds);
}

#ifdef BB_WITH_CUDA

// --- CUDA: triton.testing.do_bench's procedure, in rounds -----------------------------------

struct cuda_side {
  const timed_side* fn = nullptr;
  int64_t warmup = 1;
  int64_t repeat = 1;
  int64_t full_repeat = 1; // a full timing's repeat (a calibration makes `repeat` of them)
};

// A call outside any measurement (warm-up, estimate), with its preparation and clean-up.
void untimed_call(const timed_side& side, int64_t index) {
  call_point p{0, index, false, false};
  if (side.before)
    side.before(p);
  side.call(p);
  if (side.after)
    side.after(p);
}

// do_bench's estimate: one call, then five calls each after a cache flush, timed together
// (with each call's preparation and clean-up, so the budget covers them). A calibration
// (`share` below 1) estimates from two calls and makes that share of the timed calls, after the
// same warm-up as the kernel's.
void cuda_prime(cuda_side& side, at::Tensor& cache, const runner_options& opts, double share = 1.0) {
  untimed_call(*side.fn, 0);
  c10::cuda::device_synchronize();
  int estimate_calls = share < 1.0 ? 2 : 5;
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record();
  for (int i = 0; i < estimate_calls; ++i) {
    call_point p{0, i + 1, false, false};
    if (side.fn->before)
      side.fn->before(p);
    cache.zero_();
    side.fn->call(p);
    if (side.fn->after)
      side.fn->after(p);
  }
  end.record();
  end.synchronize();
  check_timing_code();
  double estimate_ms = std::max(1e-6, static_cast<double>(start.elapsed_time(end)) / estimate_calls);
  side.warmup = std::max<int64_t>(1, static_cast<int64_t>(opts.gpu_warmup_ms / estimate_ms));
  side.full_repeat = std::max<int64_t>(1, static_cast<int64_t>(opts.gpu_rep_ms / estimate_ms));
  side.repeat = share_of(side.full_repeat, share, opts.rounds);
}

// A side's call captured into CUDA graphs, one per round parity (the rounds take turns on two
// sets of buffers): a timed call replays the graph of its round's parity.
struct side_graphs {
  std::unique_ptr<at::cuda::CUDAGraph> of[2];
};

// Timed calls, each after a cache flush outside its own event pair; read after a sync. With
// `graphs`, each call is a replay of its parity's graph.
struct queued_calls {
  std::vector<at::cuda::CUDAEvent> starts, ends;
  // With `spanned`, an event before the first call's preparation: span_ms() is then the
  // device's time for all of the batch, flushes and preparations included.
  std::unique_ptr<at::cuda::CUDAEvent> first;
  void queue(const timed_side& side, int64_t round, at::Tensor& cache, int64_t n, side_graphs* graphs = nullptr,
             bool spanned = false) {
    if (spanned) {
      first = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
      first->record();
    }
    auto checked = pick_checked(n);
    for (int64_t i = 0; i < n; ++i) {
      call_point p = checked.at(round, i);
      if (side.before)
        side.before(p);
      cache.zero_();
      starts.emplace_back(cudaEventDefault);
      ends.emplace_back(cudaEventDefault);
      starts.back().record();
      if (graphs)
        graphs->of[round % 2]->replay();
      else
        side.call(p);
      ends.back().record();
      if (graphs && side.graph_output)
        side.graph_output(true, round % 2);
      if (side.after)
        side.after(p);
    }
  }
  std::vector<double> read(size_t from = 0) const {
    check_timing_code(); // before the events' times are read through it
    std::vector<double> out;
    for (size_t i = from; i < starts.size(); ++i)
      out.push_back(starts[i].elapsed_time(ends[i]));
    return out;
  }
  double span_ms() const {
    check_timing_code();
    return first && !ends.empty() ? static_cast<double>(first->elapsed_time(ends.back())) : 0.0;
  }
};

// Whether a capture failed in this process (graph_capture_failed).
std::atomic<bool> capture_failed{false};

// After a capture that failed: torch's default CUDA generator may have been left in capture
// mode (its capture_prologue ran, its epilogue did not), in which eager random operators fail
// or draw from the graph's state. A clone of its state (the same seed and offset, not
// capturing) takes its place.
void reset_default_generator() {
  try {
    auto gen = at::cuda::detail::getDefaultCUDAGenerator(c10::cuda::current_device());
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.graphsafe_set_state(gen.clone());
  } catch (const std::exception&) {
  }
}

// One side's call captured into a CUDA graph on a stream of its own, as round `parity`'s call
// (its `before` first, outside the capture, as for any call); null and `why` when it cannot be
// (a synchronization, a value read to the host, memory taken outside PyTorch's allocator, work
// put on another stream while captured: what a graph cannot hold). The capture's own failure
// is not the call's: the caller falls back to do_bench.
std::unique_ptr<at::cuda::CUDAGraph> capture_call(const timed_side& side, int64_t parity, std::string& why) {
  if (!side.graph_refusal.empty()) {
    why = side.graph_refusal;
    return nullptr;
  }
  if (capture_failed) {
    why = "an earlier capture in this runner failed";
    return nullptr;
  }
  call_point p{parity, 0, false, false};
  if (side.before)
    side.before(p);
  c10::cuda::device_synchronize();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  auto stream = c10::cuda::getStreamFromPool();
  // A pool of our own: on a failed capture the graph cannot name its pool, and the allocator
  // must stop routing the stream's allocations there and let the pool go.
  auto pool = at::cuda::graph_pool_handle();
  bool begun = false;
  stream_report seen;
  try {
    c10::cuda::CUDAStreamGuard on(stream);
    // Watched: a call that puts work on another stream while captured (only then: it can
    // tell, torch.cuda.is_current_stream_capturing) leaves it out of every replay.
    stream_watch watch;
    begun = true;
    // Thread-local: another thread of the process calling CUDA meanwhile does not spoil it.
    graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    side.call(p);
    graph->capture_end();
    seen = watch.stop();
  } catch (const std::exception& e) {
    why = e.what();
    why = why.substr(0, why.find('\n'));
  }
  if (why.empty() && !seen.elsewhere.empty())
    why = "while captured the call put work on another stream (" + seen.elsewhere.front() + ")";
  if (!why.empty()) {
    capture_failed = true;
    if (begun) {
      // Ends a capture the call left open, stops the allocator routing the stream's
      // allocations to the pool (unless capture_end got that far) and lets the pool go.
      cudaGraph_t left = nullptr;
      if (cudaStreamEndCapture(stream.stream(), &left) == cudaSuccess && left)
        cudaGraphDestroy(left);
      auto device = stream.device_index();
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
      } catch (const std::exception&) {
      }
      graph.reset();
      try {
        c10::cuda::CUDACachingAllocator::releasePool(device, pool);
      } catch (const std::exception&) {
      }
    }
    (void)cudaGetLastError();
    reset_default_generator();
    return nullptr;
  }
  if (side.graph_output)
    side.graph_output(false, parity);
  if (side.after)
    side.after(p);
  // The graph runs once before it is timed (its first launch uploads it to the device).
  graph->replay();
  if (side.graph_output)
    side.graph_output(true, parity);
  if (side.after)
    side.after(p);
  c10::cuda::device_synchronize();
  return graph;
}

paired_timing cuda_do_bench_pair(const timed_side& reference, const timed_side& kernel,
                                 const runner_options& opts, const reference_plan& plan, const side_fn& on_side,
                                 bool graphs = false) {
  auto cache = at::empty({opts.flush_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  cuda_side ref{&reference}, ker{&kernel};
  if (!plan.skip) {
    tell(on_side, code_side::reference);
    cuda_prime(ref, cache, opts, plan.share);
  }
  tell(on_side, code_side::kernel);
  cuda_prime(ker, cache, opts);
  if (!plan.skip) {
    tell(on_side, code_side::reference);
    for (int64_t i = 0; i < ref.warmup; ++i)
      untimed_call(reference, i);
  }
  tell(on_side, code_side::kernel);
  for (int64_t i = 0; i < ker.warmup; ++i)
    untimed_call(kernel, i);
  // The cudagraph timer: both sides' calls captured after their warm-up (both or neither, so
  // that the two sides are timed alike).
  side_graphs ref_graphs, ker_graphs;
  std::string fallback;
  if (graphs) {
    for (int64_t parity = 0; parity < 2 && fallback.empty(); ++parity) {
      std::string why;
      if (!plan.skip) {
        tell(on_side, code_side::reference);
        ref_graphs.of[parity] = capture_call(reference, parity, why);
        if (!ref_graphs.of[parity])
          fallback = "the reference's call cannot be captured in a CUDA graph: " + why;
      }
      if (fallback.empty()) {
        tell(on_side, code_side::kernel);
        ker_graphs.of[parity] = capture_call(kernel, parity, why);
        if (!ker_graphs.of[parity])
          fallback = "the kernel's call cannot be captured in a CUDA graph: " + why;
      }
    }
    graphs = fallback.empty();
  }
  int64_t rounds = std::max<int64_t>(1, std::min({opts.rounds, ker.repeat, plan.skip ? ker.repeat : ref.full_repeat}));
  std::vector<queued_calls> ref_q(static_cast<size_t>(rounds)), ker_q(static_cast<size_t>(rounds));
  for (int64_t r = 0; r < rounds; ++r) {
    // Odd rounds time the kernel first: the order cancels out over the rounds.
    for (int turn = 0; turn < 2; ++turn) {
      bool ref_turn = (turn == 0) == (r % 2 == 0);
      if (ref_turn && !plan.skip)
        ref_q[static_cast<size_t>(r)].queue(reference, r, cache, share(ref.repeat, rounds, r),
                                            graphs ? &ref_graphs : nullptr);
      else if (!ref_turn)
        ker_q[static_cast<size_t>(r)].queue(kernel, r, cache, share(ker.repeat, rounds, r),
                                            graphs ? &ker_graphs : nullptr);
    }
  }
  tell(on_side, code_side::neither);
  c10::cuda::device_synchronize();
  std::vector<std::vector<double>> ref_rounds, ker_rounds;
  for (int64_t r = 0; r < rounds; ++r) {
    ref_rounds.push_back(ref_q[static_cast<size_t>(r)].read());
    ker_rounds.push_back(ker_q[static_cast<size_t>(r)].read());
  }
  auto out = paired_from_rounds(plan, ref_rounds, ker_rounds);
  if (!fallback.empty()) {
    out.timer = "do_bench";
    out.timer_note = fallback;
  }
  return out;
}

// --- CUDA: the adaptive timer ----------------------------------------------------------------

// The mean of `xs` and its standard error over it; {0, inf} before two values.
std::pair<double, double> mean_and_rel_sem(const std::vector<double>& xs) {
  auto n = static_cast<int64_t>(xs.size());
  if (n < 2)
    return {0.0, INFINITY};
  double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(n);
  double var = 0.0;
  for (double x : xs)
    var += (x - mean) * (x - mean);
  var /= static_cast<double>(n - 1);
  return {mean, mean > 0 ? std::sqrt(var / static_cast<double>(n)) / mean : INFINITY};
}

// Batches of calls, alternating between the sides, until each side's standard error of the
// mean is under opts.adaptive_rel_sem (after at least opts.adaptive_min_calls calls) or the
// device time its batches took (each call's L2 flush and preparation included, as do_bench's
// estimate counts them) adds up to the repetition budget, and never before two rounds (so
// that every speedup has an interval). Each batch is a round; after the first two, a batch
// is as long as the spread seen so far says the standard error needs (at least
// adaptive_batch and at most as many calls as made so far), so that a noisy input takes a
// few long batches rather than many synchronizations. A calibration (`share` below 1) makes
// that share of each round's calls (at least one) in every round the kernel is timed, with
// that share of the budget, of the minimum calls and of the calls the standard error asks for
// (its bound over the square root of the share); its warm-up is the kernel's.
paired_timing cuda_adaptive_pair(const timed_side& reference, const timed_side& kernel,
                                 const runner_options& opts, const reference_plan& plan, const side_fn& on_side) {
  auto cache = at::empty({opts.flush_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  constexpr int64_t adaptive_batch = 5;
  struct state {
    const timed_side* fn;
    bool done;
    double share;
    std::vector<std::vector<double>> rounds;
    std::vector<double> all;
    double spent_ms = 0.0; // the device time of its batches
  };
  state sides[2] = {{&reference, plan.skip, plan.share, {}, {}}, {&kernel, false, 1.0, {}, {}}};
  for (auto& s : sides) {
    if (s.done)
      continue;
    tell(on_side, &s == &sides[0] ? code_side::reference : code_side::kernel);
    for (int64_t i = 0; i < 3; ++i)
      untimed_call(*s.fn, i);
  }
  tell(on_side, code_side::neither);
  c10::cuda::device_synchronize();
  auto min_calls = [&](const state& s) {
    auto m = static_cast<int64_t>(std::ceil(s.share * static_cast<double>(opts.adaptive_min_calls)));
    return std::max<int64_t>(2, m);
  };
  auto bound = [&](const state& s) { return opts.adaptive_rel_sem / std::sqrt(s.share); };
  // The mean and the standard error's ratio to it; {0, inf} before two calls.
  auto spread = [](const state& s) { return mean_and_rel_sem(s.all); };
  auto converged = [&](const state& s) {
    if (s.rounds.size() < 2)
      return false;
    if (s.spent_ms >= s.share * opts.gpu_rep_ms)
      return true; // the budget is spent: as precise as do_bench would be
    // Bounds that hold whatever the events read (a batch's span of 0 would spend nothing): the
    // timed calls alone past the budget, or more calls than any budget makes.
    constexpr size_t most_calls = 1'000'000;
    if (std::accumulate(s.all.begin(), s.all.end(), 0.0) >= s.share * opts.gpu_rep_ms || s.all.size() >= most_calls)
      return true;
    if (static_cast<int64_t>(s.all.size()) < min_calls(s))
      return false;
    auto [mean, rel_sem] = spread(s);
    return mean > 0 && rel_sem < bound(s);
  };
  // The next batch's calls for a full timing: what the standard error still asks for.
  auto next_batch = [&](const state& s) -> int64_t {
    auto n = static_cast<int64_t>(s.all.size());
    if (s.rounds.size() < 2)
      return adaptive_batch;
    auto [mean, rel_sem] = spread(s);
    double wanted = adaptive_batch;
    if (mean > 0 && std::isfinite(rel_sem)) {
      // rel_sem shrinks as 1/sqrt(n): n * (rel_sem / bound)^2 calls in all reach the bound.
      double ratio = rel_sem / bound(s);
      wanted = static_cast<double>(n) * ratio * ratio - static_cast<double>(n);
    }
    wanted = std::max(wanted, static_cast<double>(min_calls(s) - n));
    // No more than the calls made so far, nor than the budget left pays for at the device time
    // a call has cost: the last batch does not overrun the budget by much.
    double most = static_cast<double>(std::max<int64_t>(adaptive_batch, n));
    if (s.spent_ms > 0 && n > 0)
      most = std::min(most, std::ceil((s.share * opts.gpu_rep_ms - s.spent_ms) / (s.spent_ms / static_cast<double>(n))));
    wanted = std::min(std::ceil(wanted), most);
    return static_cast<int64_t>(std::max(wanted, static_cast<double>(adaptive_batch)));
  };
  for (int64_t round = 0; !sides[0].done || !sides[1].done; ++round) {
    queued_calls q[2];
    // While the kernel is timed, a calibrating reference makes its share of the kernel's batch;
    // once the kernel is done, the reference's own batch (already counting its calls).
    bool reference_alone = sides[1].done;
    int64_t batch = next_batch(reference_alone ? sides[0] : sides[1]);
    for (int turn = 0; turn < 2; ++turn) {
      int i = round % 2 == 0 ? turn : 1 - turn;
      if (!sides[i].done)
        q[i].queue(*sides[i].fn, round, cache, reference_alone ? batch : share_of(batch, sides[i].share, 1), nullptr,
                   true);
    }
    c10::cuda::device_synchronize();
    // The kernel first: a calibrating reference is done only once the kernel is too, so that it
    // is timed in every round beside it.
    for (int i : {1, 0}) {
      if (sides[i].done)
        continue;
      auto times = q[i].read();
      sides[i].spent_ms += q[i].span_ms();
      sides[i].all.insert(sides[i].all.end(), times.begin(), times.end());
      sides[i].rounds.push_back(std::move(times));
      sides[i].done = converged(sides[i]) && (sides[i].share >= 1.0 || sides[1].done);
    }
  }
  return paired_from_rounds(plan, sides[0].rounds, sides[1].rounds);
}

// --- CUDA: the synchronized timer ------------------------------------------------------------

// Whether the calls of the first `count` of `rounds` have a standard error of the mean under
// opts.adaptive_rel_sem of it, after opts.adaptive_min_calls calls.
bool precise_enough(const std::vector<std::vector<double>>& rounds, size_t count, const runner_options& opts) {
  std::vector<double> all;
  for (size_t r = 0; r < count && r < rounds.size(); ++r)
    all.insert(all.end(), rounds[r].begin(), rounds[r].end());
  if (static_cast<int64_t>(all.size()) < std::max<int64_t>(2, opts.adaptive_min_calls))
    return false;
  auto [mean, rel_sem] = mean_and_rel_sem(all);
  return mean > 0 && rel_sem < opts.adaptive_rel_sem;
}

paired_timing cuda_synchronized_pair(const timed_side& reference, const timed_side& kernel,
                                     const runner_options& opts, int64_t rounds, const side_fn& on_side,
                                     bool until_precise) {
  auto cache = at::empty({opts.flush_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  auto one = [&](const timed_side& side, const call_point& p) {
    if (side.before)
      side.before(p);
    cache.zero_();
    c10::cuda::device_synchronize();
    auto start = clock::now();
    side.call(p);
    c10::cuda::device_synchronize();
    double ms = ms_since(start);
    if (side.after)
      side.after(p);
    return ms;
  };
  // The calls that fit twice the repetition budget, from one call after a warm one.
  auto calls_of = [&](const timed_side& side) {
    untimed_call(side, 0);
    double estimate = std::max(1e-3, one(side, {0, 1, false, false}));
    auto n = static_cast<int64_t>(2.0 * opts.gpu_rep_ms / estimate);
    return std::clamp<int64_t>(n, rounds, 100 * rounds);
  };
  tell(on_side, code_side::reference);
  int64_t ref_calls = calls_of(reference);
  tell(on_side, code_side::kernel);
  int64_t ker_calls = calls_of(kernel);
  std::vector<std::vector<double>> ref_rounds(static_cast<size_t>(rounds)), ker_rounds(static_cast<size_t>(rounds));
  for (int64_t r = 0; r < rounds; ++r) {
    for (int turn = 0; turn < 2; ++turn) {
      bool ref_turn = (turn == 0) == (r % 2 == 0);
      tell(on_side, ref_turn ? code_side::reference : code_side::kernel);
      auto& side = ref_turn ? reference : kernel;
      int64_t n = share(ref_turn ? ref_calls : ker_calls, rounds, r);
      auto& out = (ref_turn ? ref_rounds : ker_rounds)[static_cast<size_t>(r)];
      auto checked = pick_checked(n);
      for (int64_t i = 0; i < n; ++i)
        out.push_back(one(side, checked.at(r, i)));
    }
    auto done = static_cast<size_t>(r + 1);
    if (until_precise && r >= 1 && precise_enough(ref_rounds, done, opts) && precise_enough(ker_rounds, done, opts)) {
      ref_rounds.resize(done);
      ker_rounds.resize(done);
      break;
    }
  }
  return paired_from_rounds({}, ref_rounds, ker_rounds);
}

#endif

} // namespace

speedup_estimate estimate_speedup(const side_timing& reference, const side_timing& kernel,
                                  double extra_rel_sd) {
  speedup_estimate e;
  if (reference.mean_ms <= 0 || kernel.mean_ms <= 0)
    return e;
  e.speedup = reference.mean_ms / kernel.mean_ms;
  auto nr = static_cast<int64_t>(reference.round_means_ms.size());
  auto nk = static_cast<int64_t>(kernel.round_means_ms.size());
  if (nr < 2 || nk < 2)
    return e;
  // The relative variance of each side's mean from the spread of its round means.
  auto rel_var = [](const side_timing& s) {
    auto n = static_cast<double>(s.round_means_ms.size());
    double mean = std::accumulate(s.round_means_ms.begin(), s.round_means_ms.end(), 0.0) / n;
    double var = 0.0;
    for (double x : s.round_means_ms)
      var += (x - mean) * (x - mean);
    var /= (n - 1);
    return var / (n * mean * mean);
  };
  double vr = rel_var(reference) + extra_rel_sd * extra_rel_sd, vk = rel_var(kernel);
  double se = std::sqrt(vr + vk);
  // Welch-Satterthwaite degrees of freedom.
  double df = (vr + vk) * (vr + vk)
              / ((vr * vr) / static_cast<double>(nr - 1) + (vk * vk) / static_cast<double>(nk - 1) + 1e-300);
  auto dof = std::max<int64_t>(1, static_cast<int64_t>(std::floor(std::min(df, 1e6))));
  double t = t_quantile(std::min<int64_t>(dof, nr + nk - 2));
  double log_s = std::log(e.speedup);
  e.ci_low = std::exp(log_s - t * se);
  e.ci_high = std::exp(log_s + t * se);
  return e;
}

void drop_preempted(std::vector<std::vector<double>>& rounds, const std::vector<std::vector<bool>>& preempted) {
  size_t calls = 0, marked = 0;
  for (size_t r = 0; r < rounds.size(); ++r) {
    calls += rounds[r].size();
    marked += static_cast<size_t>(std::count(preempted[r].begin(), preempted[r].end(), true));
  }
  if (marked == 0 || static_cast<double>(marked) > max_preempted_share * static_cast<double>(calls))
    return;
  for (size_t r = 0; r < rounds.size(); ++r) {
    std::vector<double> kept;
    for (size_t i = 0; i < rounds[r].size(); ++i)
      if (!preempted[r][i])
        kept.push_back(rounds[r][i]);
    if (!kept.empty())
      rounds[r] = std::move(kept);
  }
}

bool built_with_cuda() {
#ifdef BB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool graph_capture_failed() {
#ifdef BB_WITH_CUDA
  return capture_failed;
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

namespace {

timed_side plain(const timed_fn& fn) {
  return {nullptr, [&fn](const call_point& p) { fn(p.round); }, nullptr, nullptr, ""};
}

// The speedup's interval; a calibrated reference's drift from its cached figure.
void estimate_into(paired_timing& out, const runner_options& opts, const reference_plan& plan) {
  out.estimate = estimate_speedup(out.reference, out.kernel, opts.systematic_rel_sd);
  if (plan.cached && !plan.skip && plan.cached->mean_ms > 0 && out.reference.mean_ms > 0) {
    out.reference_calibrated = true;
    out.reference_drift = out.reference.mean_ms / plan.cached->mean_ms - 1.0;
  }
}

paired_timing timed_pair(const timed_side& reference, const timed_side& kernel, const runner_options& opts,
                         const reference_plan& plan, const side_fn& on_side) {
  paired_timing out;
  if (opts.device != "cuda") {
    out = cpu_pair(reference, kernel, opts, plan, on_side);
  } else {
#ifdef BB_WITH_CUDA
    out = opts.timer == "adaptive" ? cuda_adaptive_pair(reference, kernel, opts, plan, on_side)
                                   : cuda_do_bench_pair(reference, kernel, opts, plan, on_side,
                                                        opts.timer == "cudagraph");
#else
    throw std::runtime_error("this bbrunner was built without CUDA");
#endif
  }
  estimate_into(out, opts, plan);
  return out;
}

} // namespace

paired_timing time_pair(const timed_side& reference, const timed_side& kernel,
                        const runner_options& opts, const side_timing* cached_reference,
                        const std::function<void(code_side)>& on_side) {
  reference_plan plan;
  if (cached_reference) {
    plan.cached = cached_reference;
    plan.share = std::clamp(opts.reference_calibration, 1e-6, 1.0);
  }
  return timed_pair(reference, kernel, opts, plan, on_side);
}

paired_timing time_pair(const timed_fn& reference, const timed_fn& kernel,
                        const runner_options& opts, const side_timing* cached_reference,
                        const std::function<void(code_side)>& on_side) {
  return time_pair(plain(reference), plain(kernel), opts, cached_reference, on_side);
}

paired_timing time_pair_synchronized(const timed_side& reference, const timed_side& kernel,
                                     const runner_options& opts, int64_t rounds,
                                     const std::function<void(code_side)>& on_side, bool until_precise) {
  rounds = std::max<int64_t>(2, rounds);
  paired_timing out;
  if (opts.device != "cuda") {
    // cpu_bench's calls are synchronous already: the same timer, twice the calls, and calls
    // another thread preempted left out (drop_preempted).
    auto strict = opts;
    strict.rounds = rounds;
    strict.cpu_runs = std::max<int64_t>(opts.cpu_runs * 2, rounds);
    strict.cpu_max_seconds = opts.cpu_max_seconds * 2;
    out = cpu_pair(reference, kernel, strict, {}, on_side, true);
  } else {
#ifdef BB_WITH_CUDA
    out = cuda_synchronized_pair(reference, kernel, opts, rounds, on_side, until_precise);
#else
    throw std::runtime_error("this bbrunner was built without CUDA");
#endif
  }
  estimate_into(out, opts, {});
  return out;
}

double pending_device_work_ms(const std::string& device) {
#ifdef BB_WITH_CUDA
  if (device == "cuda") {
    at::cuda::CUDAEvent done(cudaEventDefault);
    done.record();
    done.synchronize();
    auto start = clock::now();
    c10::cuda::device_synchronize();
    return ms_since(start);
  }
#else
  (void)device;
#endif
  return 0.0;
}

double time_ms(const std::function<void()>& fn, const runner_options& opts) {
  side_timing none;
  none.mean_ms = 1.0;
  none.round_means_ms = {1.0, 1.0};
  timed_fn each = [&](int64_t) { fn(); };
  reference_plan skip{&none, 1.0, true};
  return timed_pair(plain(each), plain(each), opts, skip, {}).kernel.mean_ms;
}

} // namespace bb::runner
