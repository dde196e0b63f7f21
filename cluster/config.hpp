#pragma once

// Settings that are not flags (timeouts, slots, paths), loaded from TOML. configs/default.toml
// documents every key; --config FILE loads one; command-line flags override it.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/runner_protocol.hpp"

namespace bb {

struct settings {
  // [run]
  std::string log_dir;      ///< empty: backendbench_output_<timestamp>
  double p = 1.0;           ///< perf@p threshold
  // [evaluator]
  int64_t devices = 0;      ///< evaluator slots; 0: one per GPU, or one CPU slot without GPUs
  std::string device = "auto"; ///< "auto" (cuda when the node has GPUs), "cpu" or "cuda"
  std::string runner;       ///< bbrunner to start; empty: the one beside the program
  double job_timeout_s = 600.0;
  double call_timeout_s = 120.0;  ///< one call of kernel or reference code
  double start_timeout_s = 60.0;
  double memory_limit_gb = 0.0;   ///< per CPU runner; 0: 75% of the machine's memory / slots
  int64_t max_attempts = 2; ///< attempts per job whose runner died, before the failure is final
  // [timing]: the runner's options, defaults in messages/runner_protocol.hpp
  runner_options timing;
  bool reference_cache = true;  ///< timing.reference_cache (--no-reference-cache turns it off)
  // [checks]: checks.exploits and checks.suspicious_speedup are timing.exploit_checks and
  // timing.suspicious_speedup; checks.extra_inputs is resolved into timing.extra_inputs by
  // extra_inputs_for once the backend is known.
  std::string extra_inputs = "auto"; ///< "auto" (on for generative backends), "on" or "off"
  // [compile]
  std::string compile_cache_dir; ///< empty: ~/.cache/bbcluster/kernels (or $BBCLUSTER_CACHE)
  int64_t compile_workers = 0;   ///< 0: the node's cores minus its evaluators, at least one
  double compile_timeout_s = 600.0;
  std::string cuda_arch = "native";
  bool precompiled_header = true;
  // [nodes]
  int64_t node_port = 5555;       ///< port of a hostfile host without one
  double heartbeat_s = 1.0;       ///< heartbeat period, both ways
  double node_silence_s = 10.0;   ///< a node silent this long is lost; its jobs are requeued
  std::string node_keys;          ///< folder of `bbcluster keygen`; empty: no CURVE (loopback only)
  std::string ssh = "ssh -o BatchMode=yes"; ///< the ssh launcher's command and options
  // [generate]: the llm and kernel_agent backends
  int64_t attempts = 5;             ///< kernel versions per operator (--llm-attempts)
  bool improve_when_slow = false;   ///< another version when the best correct one is not faster than p
  int64_t authors = 4;              ///< requests or agents in flight at once
  std::string run_folder_dir;       ///< where <backend>_run_<timestamp>/ goes; "": the run folder
  // [llm]
  std::string llm_provider = "openai"; ///< "openai" (chat completions) or "anthropic"
  std::string llm_base_url;         ///< "": $OPENAI_BASE_URL, else the provider's API
  std::string llm_model;            ///< --llm-model
  std::string llm_dsl = "triton";   ///< triton, pytorch or cuda
  double llm_timeout_s = 600.0;     ///< one request
  int64_t llm_max_retries = 5;      ///< after 429, 5xx or a transport failure
  double llm_backoff_s = 2.0;       ///< first retry delay, doubled each time (Retry-After wins)
  double llm_max_backoff_s = 120.0;
  int64_t llm_max_tokens = 8192;
  double llm_temperature = 0.2;
  // [kernel_agent]
  std::string ka_python;            ///< Python with triton_kernel_agent; "": the build's Python
  int64_t ka_workers = 4;           ///< --kernel-agent-workers
  int64_t ka_max_rounds = 10;       ///< --kernel-agent-max-rounds
  double ka_timeout_s = 3600.0;     ///< one agent run for one operator
  int64_t ka_max_retries = 2;       ///< after a crashed or hung agent
  double ka_backoff_s = 10.0;
  std::string ka_provider;          ///< relay, openai, anthropic; "": the model's own (--llm-provider)
  bool ka_generate_default_test = false; ///< KernelAgent also writes and requires its own test
  // [log]
  std::string log_level = "info";
  // [evaluator] the sandbox of runners and compilers (process/sandbox.hpp)
  std::string sandbox = "auto";         ///< "auto", "required" or "off"
  int64_t sandbox_tmp_mb = 1024;        ///< size of a runner's private /tmp and of its scratch folder
  int64_t sandbox_max_processes = 4096; ///< RLIMIT_NPROC of a sandboxed program's user
  int64_t sandbox_max_file_mb = 1024;   ///< RLIMIT_FSIZE
  int64_t sandbox_max_open_files = 4096; ///< RLIMIT_NOFILE
  // [compile]
  double compile_memory_limit_gb = 4.0; ///< RLIMIT_DATA of one compiler process; 0: none
  // [scheduler]: how a sweep is split (docs/architecture.md, "Shards")
  std::string shards = "auto";         ///< "auto": operators split into shards; "off": one job each
  double shards_per_slot = 2.0;        ///< shards of (expected work per slot) / this
  // [run] and [progress]: watching and stopping a long campaign
  double grace_s = 60.0;               ///< after SIGINT/SIGTERM, running jobs may finish this long
  double progress_interval_s = 30.0;   ///< a progress line this often when stderr is not a terminal
  double reports_interval_s = 2.0;     ///< the growing reports at most this often; 0: every operator
};

/// The Python this build of bbcluster was made with (its torch provides libtorch).
std::string build_python();

/// Loads `path` over `out`. An unknown key, a wrong type, a number out of its key's range or bad
/// TOML is an error naming the file, line, column and key ("a.toml:3:1: ..."); `out` keeps its
/// values for keys the file does not set, and all of them when the file is refused.
caf::error load_settings(const std::string& path, settings& out);

/// Every key a settings file may set ("timing.rounds"), as load_settings knows them.
std::vector<std::string> setting_names();

/// The file `name` beside the running program (/proc/self/exe); `name` itself when that
/// cannot be read.
std::string beside_program(const std::string& name);

/// bbrunner beside the running program, the default for evaluator.runner.
std::string default_runner_path();

/// The project's own folder: $BBCLUSTER_HOME, else ~/.cache/bbcluster (as scripts/setup.sh).
std::string project_home();

/// The memory limit of one CPU runner in bytes: `gb` GiB, or for 0, 75% of the machine's
/// memory shared by `slots`.
uint64_t runner_memory_limit(double gb, size_t slots);

/// GPUs on this node: the /dev/nvidiaN devices, limited by CUDA_VISIBLE_DEVICES when set.
size_t count_gpus();

/// The runner options of a sweep: settings.timing with the reference-time cache folder
/// resolved ("" when the cache is off).
runner_options runner_options_of(const settings& s);

/// checks.extra_inputs for `backend`: "on" and "off" as they say; "auto" on for the
/// generative backends (llm, llm-relay, kernel_agent), off for the others and for "" (a
/// bbnode, which does not know the coordinator's backend).
bool extra_inputs_for(const settings& s, const std::string& backend);

/// scheduler.shards_per_slot as the coordinator takes it: 0 when scheduler.shards is off.
double shards_per_slot(const settings& s);

/// Bound on one evaluate request to a slot: a runner start and two full job timeouts (a
/// retry on a fresh runner) with some slack.
double evaluate_timeout_s(const settings& s);

/// Checks ranges (every number finite and within its key's bounds, timeouts at most 7 days)
/// and choices; the error names the key. load_settings checks each key's range as it reads
/// it, naming the file, line and column too.
caf::error validate(const settings& s);

} // namespace bb
