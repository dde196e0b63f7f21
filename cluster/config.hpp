#pragma once

// Settings (timeouts, slots, paths, the timer, the checks), declared once in
// messages/settings.def, loaded from TOML. configs/default.toml documents every key (made from
// that list); --config FILE loads one; --set KEY=VALUE and command-line flags override it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/runner_protocol.hpp"
#include "messages/settings.hpp"
#include "messages/wire.hpp"

namespace bb {

struct settings {
  // Every key of messages/settings.def, with its default; [timing], [checks] and
  // evaluator.cpu_threads are in `timing`. checks.extra_inputs here is "auto", "on" or
  // "off"; merge_settings resolves it for the backend into timing.extra_inputs.
#define BB_SETTING BB_SETTING_MEMBER
#define BB_RUNNER_SETTING BB_SETTING_ELSEWHERE
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
  runner_options timing;
};

/// Every setting at its default (messages/settings.def), for the structs that take some of
/// them (a slot's timeouts, KernelAgent's workers) so that they state no default of their own.
inline const settings& default_settings() {
  static const settings defaults;
  return defaults;
}

/// Who reads a setting (messages/settings.def, SCOPE).
enum class setting_scope { coordinator, node, sweep };

std::string to_string(setting_scope s);

/// One entry of messages/settings.def as the documentation shows it.
struct setting_doc {
  std::string key;          ///< "timing.rounds"
  std::string type;         ///< "string", "boolean", "integer" or "number"
  std::string default_text; ///< as TOML writes it: 5, 1.0, "auto", true
  std::string allowed;      ///< "1 to 1000", "auto, cpu or cuda", "" for any
  setting_scope scope;
  std::string flag;         ///< "--timer"; "" for none
  std::string doc;          ///< lines joined by newlines
};

/// messages/settings.def in its order.
std::vector<setting_doc> setting_docs();

/// configs/default.toml as messages/settings.def makes it: every key with its default and
/// documentation, in sections.
std::string settings_toml();

/// The README's table of settings: key, default, allowed values, scope, flag.
std::string settings_markdown();

/// Sets one key from text as `--set KEY=VALUE` gives it (TOML: 5, 0.5, true, "x"; a string
/// key also takes its value unquoted); range and choices checked. The error names `origin`
/// and the key.
caf::error set_setting(settings& s, const std::string& key, const std::string& value,
                       const std::string& origin);

/// The settings of scope sweep as TOML values by key: what the coordinator sends to nodes.
std::map<std::string, std::string> sweep_settings_of(const settings& s);

/// The settings of scope sweep as a reader sees them (strings without TOML's quotes), with
/// checks.extra_inputs resolved ("on" or "off" for the sweep's backend): what a sweep's
/// results depend on, recorded in sweep.json and stated once in its reports.
std::map<std::string, std::string> sweep_conditions_of(const settings& s);

/// What one result was measured with, on whichever node, as sweep_conditions_of writes it: the
/// runner's settings of scope sweep in `o` (timer, budgets, rounds, checks, cache use) and the
/// slot's job and call timeouts.
std::map<std::string, std::string> result_settings_of(const runner_options& o, double job_timeout_s,
                                                      double call_timeout_s);

/// Applies sweep settings a coordinator sent (sweep_settings_of's form) over `s`; a key of
/// another scope, an unknown key or a bad value is an error naming it, and `s` is then left
/// as it was.
caf::error apply_sweep_settings(settings& s, const std::map<std::string, std::string>& values);

/// The differences between what a coordinator sent and what a node applied, one line each
/// ("timing.timer: sent \"adaptive\", applied \"do_bench\""); empty when they agree.
std::vector<std::string> settings_differences(const std::map<std::string, std::string>& sent,
                                              const std::map<std::string, std::string>& applied);

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
/// retry on a fresh runner after a reference that hung), then another start and job timeout
/// (the reference's failures confirmed without the kernel, starves_reference), with some slack.
double evaluate_timeout_s(const settings& s);

/// Checks ranges (every number finite and within its key's bounds, timeouts at most 7 days)
/// and choices; the error names the key. load_settings checks each key's range as it reads
/// it, naming the file, line and column too.
caf::error validate(const settings& s);

} // namespace bb
