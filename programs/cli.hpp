#pragma once

// bbcluster the program (bb::program), apart from its sweep unit (sweep.hpp): its command
// line, settings from TOML with flags on top, the plan's messages, the runner-backed lookups
// (--list, directory kernels: they start a bbrunner), and each backend's wiring (its actors
// spawned). Configuration and wiring only: nothing here a test would want to reach past the
// programs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/config.hpp"
#include "artefacts/kernel_dir.hpp"
#include "suite/plan.hpp"
#include "suite/shards.hpp"
#include "actors/generative_generator.hpp"
#include "generate/kernel_agent.hpp"
#include "generate/llm_client.hpp"
#include "messages/types.hpp"

namespace caf {
class actor_system;
}

namespace bb::program {

struct flags {
  std::string suite = "smoke", backend = "aten", ops, llm_model, ops_directory, log_dir;
  std::string data, nodes, config, resume, log_level, launcher = "none";
  std::string llm_provider, llm_base_url, llm_dsl, ka_python;
  int64_t topn = 0, devices = 0;
  // Taken only when given (the settings' own defaults otherwise); shown in --help.
  int64_t llm_attempts = default_settings().attempts, ka_workers = default_settings().ka_workers,
          ka_max_rounds = default_settings().ka_max_rounds;
  double p = 1.0;
  bool disable_output_logs = false;
  bool list = false;
  // Timing and input selection beyond BackendBench.
  std::string timer;
  bool no_reference_cache = false;
  bool smallest_inputs = false;
  // The checks against reward hacking.
  bool no_exploit_checks = false;
  std::string extra_inputs;
  // Any setting of messages/settings.def: KEY=VALUE, applied after --config and the flags.
  std::vector<std::string> set;
  // Watching and stopping a long campaign.
  bool quiet = false;
  bool resume_anyway = false;
  // BackendBench's remaining flags (see apply_backendbench_flags).
  int64_t num_workers = 0;
  bool daemon = true, overhead_dominated = false;
  std::string load_cpp_source, harness, dtype;
  // Set by a backend, not a flag: selected operators it does not implement, with why; the
  // reports list them as not evaluated.
  std::map<std::string, std::string> not_evaluated;
};

void add_flags(CLI::App& app, flags& f);

/// BackendBench's flags bbcluster takes as they are, or with a stated meaning here:
/// --num-workers, --daemon/--no-daemon, --check-overhead-dominated-ops, --load_cpp_source,
/// --harness.
void add_backendbench_flags(CLI::App& app, flags& f);

/// --resume RUN_DIR: replaces `args` (without the program name) by the recorded sweep's
/// arguments, run again in its folder with its run directory; only --log-level, --quiet and
/// --resume-anyway may come with --resume. "" (also when there is no --resume) or why not.
std::string expand_resume(std::vector<std::string>& args);

/// What a resumed sweep takes up from its journal.
struct resumed_sweep {
  /// Operators finished before: reported, not run again.
  std::vector<eval_result> previous;
  /// Operators whose versions were all evaluated but whose final result was not written:
  /// reported now, not run again.
  std::vector<eval_result> concluded;
  /// Evaluated versions per operator, for the generative layer.
  std::map<std::string, std::vector<eval_result>> versions;
  /// Where each unfinished operator's versions go on.
  std::map<std::string, uint32_t> first_versions;
  /// Shards of unfinished operators finished before: not run again, merged into their
  /// operator's result.
  std::map<std::string, std::vector<eval_result>> shards;
};

/// Reads the journal of `run_dir` for the operators of `plan`; "" or why it cannot resume.
std::string read_resumed_sweep(const std::string& run_dir, const settings& s, const sweep_plan& plan,
                               resumed_sweep& out);

/// Leaves out of `plan` the operators a resumed sweep does not run again.
void drop_resumed_ops(const resumed_sweep& r, sweep_plan& plan);

/// Settings from --config with the flags on top, checks.extra_inputs resolved for the
/// backend into timing.extra_inputs; "" or the error.
std::string merge_settings(const CLI::App& app, flags& f, settings& s);

/// BackendBench's flags that are not plain settings: --num-workers as evaluator slots,
/// --backend llm-relay as the llm backend against a relay, --suite facto refused with the
/// reason, --load_cpp_source and --harness checked; a .parquet --data converted once into the
/// cache. "" or why the command line cannot run.
std::string apply_backendbench_flags(const CLI::App& app, flags& f, settings& s);

/// BackendBench's relay: an OpenAI-compatible server on this machine's port 11434.
inline constexpr const char* default_relay_url = "http://127.0.0.1:11434/v1";

/// Logs what loading found: bad lines, skipped operators, unmatched --ops.
void report_plan(const sweep_plan& plan);

/// Looks operator names up in a runner's dispatcher: one schema per name, "" for unknown.
std::optional<std::vector<std::string>> resolve_ops(const std::vector<std::string>& names,
                                                    const settings& s, std::string& error);

/// The directory backend: reads the kernels, reports unusable folders and unknown operators,
/// and keeps the suite's operators that have a kernel. "" or a fatal error.
std::string attach_directory(const std::string& dir, const settings& s, sweep_plan& plan,
                             std::vector<directory_kernel>& kernels);

/// --backend flag_gems: writes a kernel calling FlagGems for every selected operator FlagGems
/// registers (with the build's Python, or --kernel-agent-python) and turns the sweep into a
/// directory sweep over them, logging the operators FlagGems lacks as skipped. Refused when
/// the slots are this machine's and it has no GPU (except for --list). "" or why not; does
/// nothing for another backend.
std::string attach_flag_gems(flags& f, const settings& s, const sweep_plan& plan);

/// The command line as one string, for reports.
std::string command_line(const std::vector<char*>& words);

/// backendbench_output_<timestamp>
std::string timestamped_dir();

/// What the llm and kernel_agent backends are made of before any actor runs.
struct generative_plan {
  generative_config generator;
  llm_config llm;
  kernel_agent_config agent;
  std::string backend;
  int64_t authors = 1;
};

/// Checks what the backend needs (a model, libcurl, KernelAgent importable), looks up the
/// operators' schemas and makes the run folder; "" or a fatal error for the user.
std::string prepare_generative(const flags& f, const settings& s, const sweep_plan& plan,
                               const std::string& run_dir, const std::string& command,
                               const resumed_sweep& resumed, generative_plan& out);

/// The generative backend's actors: its authors (detached) and the generator.
struct generative_backend {
  std::string run_folder;
  std::vector<author_actor> authors;
  generator_actor generator;
};

generative_backend spawn_generative(caf::actor_system& sys, const generative_plan& plan);

/// Each operator's expected work per input on slots of `device` (suite/shards.hpp), with
/// reference times from the reference-time cache where it has them (without reading it when
/// not `with_cache`: from tensor bytes alone).
std::map<std::string, op_work> estimate_sweep_work(const suite& work, const settings& s,
                                                   const std::string& device, bool with_cache = true);

/// Whether the sweep runs on nodes (--nodes, or bbnode on every node of a Slurm allocation)
/// rather than on this process's own slots.
inline bool runs_on_nodes(const flags& f) {
  return !f.nodes.empty() || f.launcher == "slurm";
}

/// What this sweep's results depend on beyond its flags, as kept in sweep.json: every setting
/// of scope sweep (sweep_conditions_of: timing, checks, timeouts, sandbox, limits), each
/// directory kernel's SHA-256, and where it runs: this machine's torch version and device (GPU
/// models, or cpu), or for a sweep over nodes (`on_nodes`) a word that each result names its
/// node's (provenance).
std::map<std::string, std::string> sweep_conditions(const settings& s,
                                                    const std::vector<directory_kernel>& kernels,
                                                    bool on_nodes);

/// A resumed sweep's conditions against those it was started under: "" when they match or
/// `anyway` (the differences are then logged), else the refusal naming each difference.
std::string check_resumed_conditions(const std::string& run_dir,
                                     const std::map<std::string, std::string>& now, bool anyway);

} // namespace bb::program
