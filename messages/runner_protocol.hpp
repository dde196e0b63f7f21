#pragma once

// The evaluator <-> bbrunner protocol: length-prefixed msgpack maps over a dedicated socket
// (never the kernel's stdout or stderr). The runner speaks first with a hello.

#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// How a runner evaluates and times: one record from the settings file to the runner's timer,
/// sent to each runner in its "configure" frame. The defaults here are the only defaults
/// (configs/default.toml shows them).
struct runner_options {
  /// "cpu" or "cuda" ("cuda" means the one device this runner sees). Set by the evaluator.
  std::string device = "cpu";
  /// Node name, for provenance. Set by the evaluator.
  std::string node;
  /// "do_bench" (triton.testing.do_bench's procedure; BackendBench's cpu_bench on a CPU) or
  /// "adaptive" (stop once the standard error of the mean is under adaptive_rel_sem).
  std::string timer = "do_bench";
  /// cpu_bench: warm-up calls, timed calls, and a budget per measurement in seconds (past it
  /// warm-up and timed calls stop early, at least one of each; 0: none, BackendBench's fixed
  /// counts).
  int64_t cpu_warmup = 10;
  int64_t cpu_runs = 100;
  double cpu_max_seconds = 5.0;
  /// do_bench's warm-up and repetition budgets (ms of estimated time) and L2 flush buffer.
  double gpu_warmup_ms = 25.0;
  double gpu_rep_ms = 100.0;
  int64_t flush_bytes = int64_t{256} << 20;
  /// Reference and kernel are timed alternately in this many rounds, each with its share of
  /// the repetition budget, so drift hits both alike; the rounds give each speedup its
  /// confidence interval.
  int64_t rounds = 5;
  /// A systematic relative uncertainty of any timing (buffer placement, clocks) that rounds
  /// cannot see, added to each speedup's interval: differences smaller than about twice this
  /// are not claimed.
  double systematic_rel_sd = 0.01;
  /// The adaptive timer: at least this many timed calls, then stop once the standard error
  /// of the mean is below this fraction of the mean (or the repetition budget is spent).
  int64_t adaptive_min_calls = 10;
  double adaptive_rel_sem = 0.005;
  /// Intra-op threads of a CPU runner (0: torch's default, every core). A node's CPU slots
  /// share its cores; some of aten's CPU kernels are not deterministic with several threads.
  int64_t cpu_threads = 0;
  /// assert_close's tolerances.
  double atol = 1e-2;
  double rtol = 1e-2;
  /// Folder of the reference-time cache shared by sweeps and campaigns; "": no cache.
  std::string reference_cache_dir;
  /// The checks against reward hacking (docs/architecture.md, "Checks against reward
  /// hacking"): every timed call on inputs it has not seen, the outputs of timed calls
  /// checked, outputs poisoned once used, tamper checks after the kernel loads and runs, work
  /// left off the timed stream. Off: BackendBench's procedure, for comparison.
  bool exploit_checks = true;
  /// A speedup above this is measured again, stricter (fresh inputs, a synchronized timer,
  /// twice the rounds), and the stricter figure counts (flag suspicious_speedup); 0: never.
  double suspicious_speedup = 10.0;
  /// Each correctness input is also checked on two variants of its floating-point tensors:
  /// signed values, and signed values with zeros, infinities and NaN.
  bool extra_inputs = false;
  /// Whether the sweep uses the reference-time cache at all (--no-reference-cache: false);
  /// reference_cache_dir says where a node keeps it.
  bool reference_cache = true;
  MSGPACK_DEFINE_MAP(device, node, timer, cpu_warmup, cpu_runs, cpu_max_seconds, gpu_warmup_ms,
                     gpu_rep_ms, flush_bytes, rounds, systematic_rel_sd, adaptive_min_calls,
                     adaptive_rel_sem,
                     cpu_threads, atol, rtol, reference_cache_dir, exploit_checks,
                     suspicious_speedup, extra_inputs, reference_cache);
};

/// The sweep's settings as a job carries them (eval_job::settings): the coordinator's resolved
/// options, packed, so that every evaluator and runner, local or on a node started by hand,
/// times and checks as the sweep says.
inline std::string pack_settings(const runner_options& sweep) {
  return pack(sweep);
}

/// The options one job is evaluated with: how to time and check from the sweep (`settings`,
/// as pack_settings made them), where from this slot's own (`own`: its device, node name,
/// intra-op threads and reference cache folder). Empty settings: `own` as it is.
inline runner_options job_options(const runner_options& own, const std::string& settings) {
  if (settings.empty())
    return own;
  auto opts = unpack<runner_options>(settings);
  opts.device = own.device;
  opts.node = own.node;
  opts.cpu_threads = own.cpu_threads;
  opts.reference_cache_dir = own.reference_cache_dir;
  return opts;
}

/// Evaluator -> runner.
struct runner_request {
  /// "configure" (once, after the hello: `options`), "evaluate" (run `job`), "resolve" (look
  /// up `ops` in the dispatcher), "check" (allocate, compute and synchronize on the device) or
  /// "stop" (exit).
  std::string kind;
  runner_options options;
  eval_job job;
  /// Operator names (aten.X.Y) for "resolve".
  std::vector<std::string> ops;
  /// For "evaluate": the job's scratch folder, the runner's working folder while it runs.
  std::string work_dir;
  MSGPACK_DEFINE_MAP(kind, options, job, ops, work_dir);
};

/// Runner -> evaluator.
struct runner_reply {
  /// "hello" (once, at start: its protocol), "ready" (the answer to configure: where it
  /// measures), "progress" (before each step of a job
  /// that runs kernel or reference code, `text` naming it: the evaluator's per-call timeout
  /// restarts on each), "result" (one per job), "schemas" (one per resolve), "checked" (one
  /// per check, `text` empty when the device works, else why not).
  std::string kind;
  uint32_t protocol = protocol_version;
  std::string text;
  provenance where;
  eval_result result;
  /// For "schemas": the schema of each requested op, in order; empty when this torch lacks it.
  std::vector<std::string> schemas;
  /// For "progress": the step sets the runner up (loading a kernel, starting Python) and is
  /// bounded by the start timeout rather than the call timeout.
  bool setup = false;
  /// For "progress": whose code the step runs ("reference", "kernel", or "" for neither or
  /// both), and the input it is about ("correctness" or "performance", and its index). A step
  /// of the reference that runs past the call timeout is the reference's failure.
  std::string side;
  std::string input_kind;
  uint32_t input_index = 0;
  MSGPACK_DEFINE_MAP(kind, protocol, text, where, result, schemas, setup, side, input_kind,
                     input_index);
};

} // namespace bb
