#pragma once

// The evaluator <-> bbrunner protocol: length-prefixed msgpack maps over a dedicated socket
// (never the kernel's stdout or stderr). The runner speaks first with a hello.

#include <string>
#include <vector>

#include "messages/records.hpp"
#include "messages/settings.hpp"

namespace bb {

/// How a runner evaluates and times: one record from the settings file to the runner's timer,
/// sent to each runner in its "configure" frame. Its settings and their defaults come from
/// messages/settings.def (configs/default.toml shows them).
struct runner_options {
  /// "cpu" or "cuda" ("cuda" means the one device this runner sees). Set by the evaluator.
  std::string device = "cpu";
  /// Node name, for provenance. Set by the evaluator.
  std::string node;
  /// do_bench's L2 flush buffer.
  int64_t flush_bytes = int64_t{256} << 20;
  /// assert_close's tolerances.
  double atol = 1e-2;
  double rtol = 1e-2;
  /// Each correctness input is also checked on two variants of its floating-point tensors:
  /// signed values, and signed values with zeros, infinities and NaN (checks.extra_inputs,
  /// resolved for the backend).
  bool extra_inputs = false;
  // The settings of messages/settings.def that the runner reads: [timing], [checks] and
  // evaluator.cpu_threads (timer, rounds and budgets, the reference-time cache, the checks
  // against reward hacking).
#define BB_SETTING BB_SETTING_ELSEWHERE
#define BB_RUNNER_SETTING BB_SETTING_MEMBER
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
  MSGPACK_DEFINE_MAP(device, node, timer, cpu_warmup, cpu_runs, cpu_max_seconds, gpu_warmup_ms,
                     gpu_rep_ms, flush_bytes, rounds, systematic_rel_sd, adaptive_min_calls,
                     adaptive_rel_sem,
                     cpu_threads, atol, rtol, reference_cache_dir, exploit_checks,
                     suspicious_speedup, extra_inputs, reference_cache, reference_calibration);
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

/// What an evaluator asks its runner.
BB_NAMED_ENUM(runner_request_kind,
  /// Once, after the runner's hello: take `options`.
  configure,
  /// Run `job` (in `work_dir`).
  evaluate,
  /// Look up `ops` in the dispatcher.
  resolve,
  /// Allocate, compute and synchronize on the device.
  check,
  /// Exit.
  stop);

/// Evaluator -> runner.
struct runner_request {
  runner_request_kind kind = runner_request_kind::stop;
  runner_options options;
  eval_job job;
  /// Operator names (aten.X.Y) for "resolve".
  std::vector<std::string> ops;
  /// For "evaluate": the job's scratch folder, the runner's working folder while it runs.
  std::string work_dir;
  /// For "evaluate" of a Python kernel: its entry in the JIT cache's store (artefacts/
  /// jit_cache.hpp), which the runner copies into its own JIT folder before loading the
  /// kernel; "" for none.
  std::string jit_entry;
  MSGPACK_DEFINE_MAP(kind, options, job, ops, work_dir, jit_entry);
};

/// What a runner tells its evaluator.
BB_NAMED_ENUM(runner_reply_kind,
  /// Once, at start: its protocol.
  hello,
  /// The answer to configure: where it measures (`where`).
  ready,
  /// Before each step of a job that runs kernel or reference code, `text` naming it: the
  /// evaluator's per-call timeout restarts on each.
  progress,
  /// One per job.
  result,
  /// One per resolve.
  schemas,
  /// One per check, `text` empty when the device works, else why not.
  checked,
  /// For a job with a stream_tag, as each input ends: its records in `result` (one
  /// correctness record, one performance record, or both for an input checked and then
  /// timed), `input` and `input_index` saying which.
  input);

/// Runner -> evaluator.
struct runner_reply {
  runner_reply_kind kind = runner_reply_kind::hello;
  uint32_t protocol = protocol_version;
  std::string text;
  provenance where;
  eval_result result;
  /// For "schemas": the schema of each requested op, in order; empty when this torch lacks it.
  std::vector<std::string> schemas;
  /// For "progress": the step sets the runner up (loading a kernel, starting Python) or is
  /// bbrunner's own work on an input (building it, checking results), and is bounded by the
  /// start timeout rather than the call timeout.
  bool setup = false;
  /// For "progress": whose code the step runs ("reference", "kernel", or "" for neither or
  /// both), and the input it is about ("correctness" or "performance", and its index). A step
  /// of the reference that runs past the call timeout is the reference's failure.
  code_side side = code_side::neither;
  input_kind input = input_kind::none;
  uint32_t input_index = 0;
  MSGPACK_DEFINE_MAP(kind, protocol, text, where, result, schemas, setup, side, input,
                     input_index);
};

} // namespace bb
