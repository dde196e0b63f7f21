#pragma once

// Resuming an interrupted sweep (--resume RUN_DIR): the command line a sweep keeps in its run
// folder (sweep.json), and what its journal (results.jsonl) says is finished. No actors here.

#include <map>
#include <string>
#include <vector>

#include "messages/records.hpp"
#include "suite/suite.hpp"

namespace bb {

// The fields of sweep.json, once: its JSON is made from them.
#define BB_FIELDS_SWEEP_RECORD format, args, cwd, conditions
/// How a sweep was started, kept in `<run dir>/sweep.json`.
struct sweep_record {
  /// The arguments after the program name.
  std::vector<std::string> args;
  /// The folder it was started in (relative paths in `args` are relative to it).
  std::string cwd;
  /// What its results depend on beyond the flags, by name: "torch version", "device",
  /// "timing.cpu_runs", "kernel aten.relu.default" (a kernel file's SHA-256), ...
  std::map<std::string, std::string> conditions;
  /// The file's format: 1 since conditions were kept; 2 since they are every setting of
  /// scope sweep, with "each node's own" device and torch over nodes.
  int format = 2;
};

/// The differences between the conditions a sweep was started under (in sweep.json's format
/// `then_format`) and those of now, one line each ("torch version: 2.11.0 then, 2.12.0 now");
/// empty when they match. Numbers compare by value (5 and 5.0 are one). Against format 1, a
/// setting it did not record is not a change, nor is the device or torch over nodes, which it
/// recorded as the coordinator's.
std::vector<std::string> changed_conditions(const std::map<std::string, std::string>& then,
                                            const std::map<std::string, std::string>& now,
                                            int then_format = sweep_record{}.format);

/// `program` and `args` as one shell command line, each word quoted where a shell needs it.
std::string shell_command(const std::string& program, const std::vector<std::string>& args);

/// The command that takes up the sweep of `run_dir`: this program's path, --resume and the
/// folder's absolute path, quoted for a shell where needed.
std::string resume_command_for(const std::string& run_dir);

/// The command a recorded sweep was started with (`bbcluster` and its arguments, to be run in
/// its folder `r.cwd`): what a resumed sweep's reports show, as the sweep's own would.
std::string recorded_command(const sweep_record& r);

/// Writes `<run_dir>/sweep.json`; "" or why not.
std::string write_sweep_record(const std::string& run_dir, const sweep_record& r);

/// Reads `<run_dir>/sweep.json`; "" or why not (naming the file).
std::string read_sweep_record(const std::string& run_dir, sweep_record& out);

/// The arguments that resume a recorded sweep in `run_dir` (an absolute path): the recorded
/// ones without --log-dir, --disable-output-logs and --resume, then `--log-dir run_dir
/// --resume run_dir`, then `extra` (e.g. --log-level).
std::vector<std::string> resume_args(const sweep_record& r, const std::string& run_dir,
                                     const std::vector<std::string>& extra);

/// What a journal says of an interrupted sweep.
struct journal_state {
  /// Each finished operator's result (its last job_finished line).
  std::map<std::string, eval_result> finished;
  /// The terminal results of shards of operators, per operator, in journal order
  /// (shard_finished lines); an operator's job_finished line supersedes them.
  std::map<std::string, std::vector<eval_result>> shards;
  /// The evaluated kernel versions of a generative backend, per operator, in order
  /// (version_evaluated lines; a version evaluated again replaces its earlier line).
  std::map<std::string, std::vector<eval_result>> versions;
  /// "path:line: why" for each line that cannot be read (one cut short by a kill); the rest
  /// still counts.
  std::vector<std::string> problems;
};

/// The shards of `op` a resumed sweep takes up from its journal's shard lines: those of the
/// operator's one kernel (version 0) whose inputs are still the operator's, each input once
/// (a later line that covers an input again is left out).
std::vector<eval_result> shards_to_keep(const op_inputs& op, const std::vector<eval_result>& lines);

/// Whether `shards` cover every input of `op`.
bool covers_every_input(const op_inputs& op, const std::vector<eval_result>& shards);

/// Reads a journal; "" or why it cannot be read at all.
std::string read_journal_state(const std::string& path, journal_state& out);

} // namespace bb
