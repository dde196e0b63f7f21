#pragma once

// The records that cross process boundaries (coordinator <-> node <-> runner). Plain
// aggregates with msgpack map encodings; no CAF and no torch here, so bbrunner can use them.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "messages/outcome.hpp"

namespace bb {

/// Version of the msgpack wire protocol; a peer with another version is refused.
inline constexpr uint32_t protocol_version = 1;

/// What an artefact holds.
BB_NAMED_ENUM(kernel_kind,
  /// The operator itself (the aten backend): the reference against itself.
  aten,
  /// Python source with a function <folder>_kernel_impl.
  py,
  /// C++ source, built on the node that evaluates it into a loadable object.
  cpp,
  /// CUDA source, built with nvcc on the node that evaluates it.
  cu,
  /// No kernel: the generator produced none (the artefact's why_none says why).
  none);

/// Built into a loadable object before it runs (the compile pool's work).
inline bool is_native(kernel_kind k) {
  return k == kernel_kind::cpp || k == kernel_kind::cu;
}

/// The kind of a kernel file by its extension (".py", ".cpp", ".cu"), if it is one.
inline std::optional<kernel_kind> kernel_kind_of_extension(const std::string& ext) {
  if (ext.size() < 2 || ext[0] != '.')
    return std::nullopt;
  auto k = parse_enum<kernel_kind>(ext.substr(1));
  if (k && *k != kernel_kind::aten && *k != kernel_kind::none)
    return k;
  return std::nullopt;
}

// artefact's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_ARTEFACT kind, path, source, hash, entry, object_path, why_none
/// A kernel to evaluate: what a generator produced for one operator.
struct artefact {
  kernel_kind kind = kernel_kind::none;
  /// Where the source came from (e.g. the file of a directory kernel), empty for aten.
  std::string path;
  std::string source;
  /// SHA-256 of the source (hex); "aten" for the aten backend.
  std::string hash;
  /// The entry function: <folder>_kernel_impl.
  std::string entry;
  /// The loadable object built from a native source on the node that evaluates it.
  std::string object_path;
  /// Kind none: why the generator has no kernel (no code in the reply, a file it could not
  /// write, an entry point missing), for the failed result.
  std::string why_none;
  MSGPACK_DEFINE_MAP(BB_FIELDS_ARTEFACT);
};

// compile_outcome's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_COMPILE_OUTCOME status, object_path, message, log_path, cached, seconds
/// What building a native artefact on a node ended with.
struct compile_outcome {
  /// ok, compile_failed or needs_cuda.
  outcome status = outcome::ok;
  std::string object_path;
  /// The compiler's errors, trimmed, for the report.
  std::string message;
  /// The full compiler output, on the node that compiled.
  std::string log_path;
  bool cached = false;
  double seconds = 0.0;
  MSGPACK_DEFINE_MAP(BB_FIELDS_COMPILE_OUTCOME);
};

/// Which of an operator's lists an input is in; none for a step about no input.
BB_NAMED_ENUM(input_kind, none, correctness, performance);

/// Whose code a step of a job runs; neither for the runner's own (or both: timing).
BB_NAMED_ENUM(code_side, neither, reference, kernel);

// input_failure's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_INPUT_FAILURE kind, index, message
/// An input the runner is not to run, and why: its reference ran past the call timeout on an
/// earlier attempt (it is recorded as reference_error and left out of the scores).
struct input_failure {
  input_kind kind = input_kind::correctness;
  uint32_t index = 0;
  std::string message;
  MSGPACK_DEFINE_MAP(BB_FIELDS_INPUT_FAILURE);
};

// cached_reference's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_CACHED_REFERENCE index, mean_ms, round_means_ms
/// A reference timing from the reference-time cache, for one performance input of a job.
struct cached_reference {
  uint32_t index = 0;
  double mean_ms = 0.0;
  std::vector<double> round_means_ms;
  MSGPACK_DEFINE_MAP(BB_FIELDS_CACHED_REFERENCE);
};

// shard_span's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_SHARD_SPAN correctness_begin, correctness_count, correctness_total, \
  performance_begin, performance_count, performance_total
/// Which of its operator's inputs a job carries (docs/architecture.md, "Shards"): one contiguous
/// run of the operator's correctness inputs and one of its performance inputs. All zero: the
/// job carries every input of its operator, as a job that is not a shard does.
struct shard_span {
  uint32_t correctness_begin = 0;
  uint32_t correctness_count = 0;
  uint32_t correctness_total = 0;
  uint32_t performance_begin = 0;
  uint32_t performance_count = 0;
  uint32_t performance_total = 0;
  /// Whether this is part of an operator rather than all of it.
  bool is_part() const {
    return correctness_count < correctness_total || performance_count < performance_total;
  }
  MSGPACK_DEFINE_MAP(BB_FIELDS_SHARD_SPAN);
};

// eval_job's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_EVAL_JOB job_id, attempt, op_name, kernel, correctness_inputs, \
  performance_inputs, reference_failures, cached_references, shard, settings, stream_tag
/// One operator's evaluation, or one shard of it: its inputs as argument strings, and the
/// kernel to run on them. Input indices within a job (reference_failures, cached_references,
/// progress frames) count from the job's first input.
struct eval_job {
  uint64_t job_id = 0;
  uint32_t attempt = 0;
  std::string op_name;
  artefact kernel;
  std::vector<std::string> correctness_inputs;
  std::vector<std::string> performance_inputs;
  /// Inputs left out because their reference failed on an earlier try of this job.
  std::vector<input_failure> reference_failures;
  /// Reference timings the evaluator found in the reference-time cache.
  std::vector<cached_reference> cached_references;
  /// Where these inputs lie among the operator's.
  shard_span shard;
  /// The sweep's settings (runner_protocol.hpp: pack_settings, job_options), stamped by the
  /// coordinator on every job; empty: the evaluator's own.
  std::string settings;
  /// Non-empty: each input's records are streamed as the input ends (messages/input_stream.hpp),
  /// tagged with this (a served request's key); empty: only the job's result.
  std::string stream_tag;
  MSGPACK_DEFINE_MAP(BB_FIELDS_EVAL_JOB);
};

// correctness_record's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_CORRECTNESS_RECORD op_name, args, is_correct, error_msg, error_type, traceback, \
  max_abs_error, max_rel_error, test_type
/// BackendBench's CorrectnessTestResult, field for field.
struct correctness_record {
  std::string op_name;
  std::string args;
  bool is_correct = false;
  std::string error_msg;
  std::string error_type;
  std::string traceback;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  std::string test_type = "correctness";
  MSGPACK_DEFINE_MAP(BB_FIELDS_CORRECTNESS_RECORD);
};

// performance_record's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_PERFORMANCE_RECORD op_name, args, speedup, benchmark_time_ms, \
  reference_time_ms, error_msg, successfully_ran, test_type, speedup_ci_low, speedup_ci_high, \
  timing_rounds, reference_cached, reference_drift, reference_round_means_ms, unverified_speedup, timer
/// BackendBench's PerformanceTestResult, field for field.
struct performance_record {
  std::string op_name;
  std::string args;
  double speedup = 0.0;
  double benchmark_time_ms = 0.0;
  double reference_time_ms = 0.0;
  std::string error_msg;
  bool successfully_ran = false;
  std::string test_type = "performance";
  // Beyond BackendBench: the speedup's 95% confidence interval from the timing rounds (both 0
  // when there were fewer than two), the rounds, and whether the reference was timed as a
  // calibration against a figure of the reference-time cache (a share of a full timing's
  // calls, timing.reference_calibration, beside the kernel as always; not for an outlier
  // measured again with the synchronized timer, which times both sides in full), with
  // reference_drift its figure over the cached one, less 1. reference_time_ms is always the
  // figure measured in this run.
  double speedup_ci_low = 0.0;
  double speedup_ci_high = 0.0;
  uint32_t timing_rounds = 0;
  bool reference_cached = false;
  double reference_drift = 0.0;
  /// The reference's round means (ms), when the cache is to keep them: measured in full here,
  /// or a calibration that drifted from the cached figure (which it then replaces).
  std::vector<double> reference_round_means_ms;
  /// When the speedup was above checks.suspicious_speedup: the first measurement's speedup,
  /// which the stricter one (in `speedup`) replaced; 0 otherwise.
  double unverified_speedup = 0.0;
  /// Which timer measured `speedup`: "do_bench", "adaptive", "cudagraph" (replays of the
  /// calls captured in CUDA graphs; "do_bench" instead when a side's call could not be
  /// captured), "cpu_bench" (every CPU measurement, a re-verified outlier's included), or
  /// "synchronized" (on a GPU, every call between two device synchronizations: a re-verified
  /// outlier, or a kernel that left work off the timed stream).
  std::string timer;
  MSGPACK_DEFINE_MAP(BB_FIELDS_PERFORMANCE_RECORD);
};

/// An input's verdict, read from its record through the outcomes' table: ok when it passed
/// (or was timed), else the outcome its error names (a correctness record's error_type, the
/// name before a performance record's first ':'), or exception (the type of what the kernel
/// raised, or a check it failed: tensor_subclass, ...).
inline outcome input_outcome(const correctness_record& c) {
  if (c.is_correct)
    return outcome::ok;
  return parse_enum<outcome>(c.error_type).value_or(outcome::exception);
}

inline outcome input_outcome(const performance_record& p) {
  if (p.successfully_ran)
    return outcome::ok;
  return outcome_prefix(p.error_msg).value_or(outcome::exception);
}

// provenance's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_PROVENANCE node, device, driver, torch_version, artefact_hash, slot, sandbox, \
  settings
/// Where a result was measured.
struct provenance {
  std::string node;
  std::string device;
  std::string driver;
  std::string torch_version;
  std::string artefact_hash;
  /// The evaluator slot on its node.
  uint32_t slot = 0;
  /// How the runner was sandboxed: "namespaces", "off", or "none: <why>" (evaluator.sandbox =
  /// "auto" where namespaces are not available).
  std::string sandbox;
  /// The sweep's settings the slot measured this with (cluster/config.hpp, result_settings_of:
  /// timer, budgets, rounds, checks, reference-cache use, job and call timeouts), by key.
  std::map<std::string, std::string> settings;
  MSGPACK_DEFINE_MAP(BB_FIELDS_PROVENANCE);
};

// eval_result's fields, once: msgpack, CAF's inspect and JSON are made from them.
#define BB_FIELDS_EVAL_RESULT job_id, attempt, op_name, outcome, detail, correctness, \
  performance, where, wall_seconds, flags, runner_restarts, version, phases, shard, shards
/// The terminal record of one job.
struct eval_result {
  uint64_t job_id = 0;
  uint32_t attempt = 0;
  std::string op_name;
  /// ok when the runner evaluated every input (each input carries its own verdict);
  /// otherwise why the job as a whole failed.
  bb::outcome outcome = bb::outcome::ok;
  std::string detail;
  std::vector<correctness_record> correctness;
  std::vector<performance_record> performance;
  provenance where;
  double wall_seconds = 0.0;
  /// Honesty and exploit checks the kernel failed or tripped (docs/architecture.md,
  /// "Checks against reward hacking"): mutates_input, aliases_input, uses_cuda_stream,
  /// replaces_timer, replaces_comparison, replaces_operator, patches_code, changes_dispatch,
  /// changes_global_state, leaves_thread_running, tensor_subclass, wrong_in_timed_calls,
  /// work_off_timed_stream, suspicious_speedup.
  std::vector<std::string> flags;
  /// Runners the evaluator had to start afresh (after a fault) before this result.
  uint32_t runner_restarts = 0;
  /// Which kernel version of a generative backend this evaluates (v1, v2, ...); 0 otherwise.
  uint32_t version = 0;
  /// Seconds spent in each phase of the job (see phase names in docs/architecture.md): the
  /// runner's own phases, and the evaluator's runner start, moving results and waiting.
  std::map<std::string, double> phases;
  /// The inputs of the job this result is of (a shard's place among its operator's inputs).
  shard_span shard;
  /// How many shards this operator's result was merged from; 0: it was evaluated as one job.
  uint32_t shards = 0;
  MSGPACK_DEFINE_MAP(BB_FIELDS_EVAL_RESULT);
};

/// A result of `job`, measured `where`, before its records: which job, attempt, kernel and
/// inputs it answers. Every place that answers a job starts here, so none misses a field.
inline eval_result result_for(const eval_job& job, provenance where = {}) {
  eval_result r;
  r.job_id = job.job_id;
  r.attempt = job.attempt;
  r.op_name = job.op_name;
  r.where = std::move(where);
  r.where.artefact_hash = job.kernel.hash;
  r.shard = job.shard;
  return r;
}

/// Packs any msgpack-defined value into a byte string.
template <class T>
std::string pack(const T& x) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, x);
  return std::string(buf.data(), buf.size());
}

/// Unpacks a byte string; throws msgpack exceptions on malformed input (callers at the
/// process edge turn them into errors).
template <class T>
T unpack(const std::string& bytes) {
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  return handle.get().as<T>();
}

/// The detail of an infra_error whose runner lost its CUDA context before the kernel ran (a
/// device fault, a busy GPU): the job is retried, on a fresh runner.
inline constexpr const char* lost_device_detail =
  "the CUDA context was lost before the kernel ran: ";

/// Whether a runner that returned `r` must be replaced before the next job.
inline bool spoils_runner(const eval_result& r) {
  return spoils_runner(r.outcome)
         || (r.outcome == outcome::infra_error && r.detail.rfind(lost_device_detail, 0) == 0);
}

} // namespace bb
