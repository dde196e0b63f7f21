#pragma once

// The timers, in bbrunner's C++ code where kernel code cannot reach them: BackendBench's
// cpu_bench on the CPU, triton.testing.do_bench's procedure on CUDA, an adaptive timer
// (opt-in) that stops once the mean is known well enough, and a CUDA graph timer (opt-in) whose
// timed calls are replays of each side's call captured once, so that the time measured is the
// device's without the launch overhead of the call's host code. Reference and kernel are timed in
// alternating rounds so that drift of the machine hits both alike, and the rounds give each
// speedup a confidence interval.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "messages/runner_protocol.hpp"

namespace bb::runner {

/// What one side (reference or kernel) measured: the mean of its timed calls and the mean of
/// each round.
struct side_timing {
  double mean_ms = 0.0;
  std::vector<double> round_means_ms;
  int64_t calls = 0;
};

/// A speedup with its 95% confidence interval (reference over kernel); the interval is empty
/// (low = high = 0) when fewer than two rounds of either side were timed.
struct speedup_estimate {
  double speedup = 1.0;
  double ci_low = 0.0;
  double ci_high = 0.0;
};

/// A function timed by round: the round number lets the caller take turns on buffers (even and
/// odd rounds swap the reference's and the kernel's inputs, so their placement in memory
/// cancels out).
using timed_fn = std::function<void(int64_t round)>;

/// How many timed calls of each round of each side are checked.
constexpr int checked_per_round = 1;

/// Where one call of a side lies: its round, its number among that side's calls of the round,
/// and whether its output is to be checked (checked_per_round calls of each round, drawn from
/// the operating system's entropy, so that no kernel can tell which), with `rank` its number
/// among the round's checked calls (-1 for others). Warm-up and estimate calls have `timed`
/// false.
struct call_point {
  int64_t round = 0;
  int64_t index = 0;
  bool checked = false;
  bool timed = true;
  int rank = -1;
};

/// One side of a timing: `call` is measured; `before` (fresh inputs) and `after` (keep or
/// poison the output) run outside the measured interval, `before` ahead of the L2 flush. On
/// CUDA all three queue work on the current stream. Empty `before` and `after`: nothing.
struct timed_side {
  std::function<void(const call_point&)> before;
  std::function<void(const call_point&)> call;
  std::function<void(const call_point&)> after;
  /// The cudagraph timer's: `false` right after `call` was captured into the graph of round
  /// parity `parity` (remember what it returned: that graph's outputs), `true` after each
  /// replay of it (make them the call's output, for `after` to keep or poison). Empty: `after`
  /// needs no output.
  std::function<void(bool replayed, int64_t parity)> graph_output;
  /// Why this side's call must not be captured at all (an input on the CPU, whose values a
  /// graph would freeze); "" when it may be.
  std::string graph_refusal;
};

/// The reference's and the kernel's timings, taken together.
struct paired_timing {
  side_timing reference;
  side_timing kernel;
  speedup_estimate estimate;
  /// Whether the reference was a calibration against a cached figure, and how far its figure
  /// now lies from the cached one (now / cached - 1).
  bool reference_calibrated = false;
  double reference_drift = 0.0;
  /// The timer that measured, when it is not opts.timer: "do_bench" when the cudagraph timer
  /// could not capture a side's call (`timer_note` says why).
  std::string timer;
  std::string timer_note;
};

/// A cached reference figure further than this from its calibration is replaced by the
/// calibration's (the figure that counts is the calibration's either way; the cached one is
/// what the next calibration's drift is told against and what a sweep's shards are cut by).
constexpr double reference_refresh_drift = 0.05;

/// Whether the reference-time cache keeps a reference timing: one timed in full (no cached
/// figure), or a calibration `drift` away from the cached figure by more than
/// reference_refresh_drift.
inline bool cache_keeps(bool calibrated, double drift) {
  return !calibrated || drift > reference_refresh_drift || drift < -reference_refresh_drift;
}

/// Times `reference` and `kernel` alternately in opts.rounds rounds with opts.timer on
/// opts.device, odd rounds with the kernel first. opts.timer "cudagraph" on CUDA: do_bench's
/// procedure (estimate, warm-up, calls, each after an L2 flush outside its events) whose timed
/// calls are replays of a CUDA graph of the side's call, captured once per round parity after the
/// warm-up (each `before` refills the inputs the graph reads; `after` sees the graph's
/// outputs through graph_output); a call that cannot be captured (it synchronizes, reads a
/// value to the host, ...) makes the pair fall back to do_bench, told in `timer`. The interval includes the systematic
/// uncertainty opts.systematic_rel_sd. With `cached_reference` (the reference's timing from
/// the reference cache) the reference is calibrated: timed now in every round, alternating
/// with the kernel as always, after the same warm-up, with opts.reference_calibration of a
/// full timing's calls (at least one call a round). The figure measured now is the reference's, never the
/// cached one, which another run took at another clock or temperature; `reference_drift` tells
/// how far the two lie apart. Throws what the calls throw.
/// `on_side` is told reference or kernel before each side's calls of a round are run or
/// queued, so that a crash or a hang is blamed on the side that had it.
paired_timing time_pair(const timed_fn& reference, const timed_fn& kernel,
                        const runner_options& opts, const side_timing* cached_reference = nullptr,
                        const std::function<void(code_side)>& on_side = {});

/// The same with each side's preparation and clean-up outside the measured interval. do_bench's
/// estimate (and so its number of calls) and cpu_bench's budget include them, so that they
/// cost no more wall time than the budgets allow.
paired_timing time_pair(const timed_side& reference, const timed_side& kernel,
                        const runner_options& opts, const side_timing* cached_reference = nullptr,
                        const std::function<void(code_side)>& on_side = {});

/// The stricter CPU measurement leaves out a call during which the operating system preempted
/// the timing thread (another process's time slice in a call of microseconds made aten ten
/// times faster than itself on a loaded machine), but at most this share of a side's calls:
/// every call is made once, checked or not, so no call can be told from another by being made
/// again, and a kernel that preempts its own slow calls (a busy thread of its own) can have no
/// more than a fifth of them left out, which the checked calls' outputs bound.
constexpr double max_preempted_share = 0.2;

/// Leaves the calls marked in `preempted` out of `rounds` (each call's milliseconds, per round)
/// when they are at most max_preempted_share of all, keeping at least one call per round.
void drop_preempted(std::vector<std::vector<double>>& rounds, const std::vector<std::vector<bool>>& preempted);

/// The synchronized timer: every call between two device synchronizations, timed by the host's
/// clock, so that work on any stream or deferred to later is inside the measurement (and so is
/// the launch). Reference and kernel alternate in `rounds` rounds of calls within the budget
/// (2 x opts.gpu_rep_ms of calls per side on CUDA, cpu_bench's on a CPU). Used to re-verify an
/// outlier and for a kernel that left work off the timed stream. With `until_precise` (the
/// adaptive timer's sweeps, never an outlier's check), CUDA rounds stop once each side's
/// standard error of the mean is under opts.adaptive_rel_sem after at least
/// opts.adaptive_min_calls calls and two rounds, as the adaptive timer stops.
paired_timing time_pair_synchronized(const timed_side& reference, const timed_side& kernel,
                                     const runner_options& opts, int64_t rounds,
                                     const std::function<void(code_side)>& on_side = {},
                                     bool until_precise = false);

/// After `fn` ran on the current CUDA stream: waits for that stream, then times a device-wide
/// synchronization. What that waited for is work the call left elsewhere on the device (another
/// stream, a thread): the milliseconds it took. 0 on a CPU.
double pending_device_work_ms(const std::string& device);

/// Times one function alone (for benchmarks): the mean per call in milliseconds.
double time_ms(const std::function<void()>& fn, const runner_options& opts);

/// Speedup of `kernel` over `reference` with a 95% interval from their round means (t
/// distribution on the log ratio, delta method), widened by `extra_rel_sd`, a further relative
/// uncertainty of the reference (time_pair's systematic one).
speedup_estimate estimate_speedup(const side_timing& reference, const side_timing& kernel,
                                  double extra_rel_sd = 0.0);

/// Waits for the device's queued work (nothing on the CPU).
void synchronize(const std::string& device);

/// Whether this bbrunner was built with CUDA.
bool built_with_cuda();

/// Whether a CUDA graph capture of the cudagraph timer failed in this process: torch's default
/// generator may be left in capture mode, so the runner takes no further job.
bool graph_capture_failed();

} // namespace bb::runner
