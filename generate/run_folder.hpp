#pragma once

// The run folder of a generative campaign (docs/architecture.md, "Files"), KernelAgent's layout:
//   <backend>_run_<timestamp>/
//     agent_logs/
//     <folder>/<folder>_implementation_v<N>.{py,cu}   one version per attempt
//     <folder>/<folder>_summary.txt                    per-op summary
//     <folder>_session_<session name>/                 the agent's session, preserved whole
//                                                     (relu__default_session_session_2026...)
//     OVERALL_SUMMARY.txt
//     README.md
// Its operator folders are the directory backend's, so the folder can be re-evaluated with
// --backend directory. Summaries are rewritten as versions are evaluated: a campaign that is
// killed leaves them as far as it got.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// One evaluated (or failed) version of an operator's kernel.
struct version_record {
  uint32_t version = 0;
  /// The version's file name, empty when the author produced no kernel.
  std::string file;
  /// How its evaluation ended, one line: "correct, speedup 1.10x", "no_kernel: ...".
  std::string verdict;
  /// What the author said (model, agent worker and rounds), and how long it took.
  std::string author_note;
  double author_seconds = 0.0;
};

/// What a per-op summary says.
struct op_summary {
  std::string op_name;
  std::string folder;
  std::vector<version_record> versions;
  /// "in progress", "passed", "failed" or "skipped" (cannot run here: left out of the scores).
  std::string status = "in progress";
  /// The version that stands (0: none yet).
  uint32_t final_version = 0;
  /// Why the final status is what it is.
  std::string why;
  /// The preserved agent sessions, folder names in the run folder.
  std::vector<std::string> sessions;
};

/// Settings of the campaign as "key", "value" lines for the summaries.
using settings_lines = std::vector<std::pair<std::string, std::string>>;

class run_folder {
public:
  /// Creates `<parent>/<backend>_run_<timestamp>/` with agent_logs/ and README.md; "" or why
  /// not. `command` is the command line, for the README.
  std::string create(const std::string& parent, const std::string& backend,
                     const settings_lines& settings, const std::string& command);

  /// Takes up the existing run folder `path` of an interrupted campaign; "" or why not.
  std::string reopen(const std::string& path, const std::string& backend,
                     const settings_lines& settings);

  /// The newest `<backend>_run_*` folder in `parent`, or "".
  static std::string find_latest(const std::string& parent, const std::string& backend);

  /// The file of a version already written (any kind), or "".
  std::string version_file(const std::string& folder, uint32_t version) const;

  /// The preserved session folders of an operator, by name.
  std::vector<std::string> sessions_of(const std::string& folder) const;

  const std::string& path() const {
    return path_;
  }

  std::string agent_logs() const {
    return path_ + "/agent_logs";
  }

  /// Writes `<folder>/<folder>_implementation_v<version>.<kind>`; its path, or "" with `error`.
  std::string write_version(const std::string& folder, uint32_t version, kernel_kind kind,
                            const std::string& code, std::string& error) const;

  /// Moves an agent's session folder to `<folder>_session_<its name>` (copies it when it is
  /// on another file system), and removes the folder in agent_logs/ that held it when it is
  /// left empty; the new folder's name, or "" with `error`.
  std::string preserve_session(const std::string& folder, const std::string& session_dir,
                               std::string& error) const;

  /// Writes `<folder>/<folder>_summary.txt`; "" or why not.
  std::string write_op_summary(const op_summary& s) const;

  /// Writes OVERALL_SUMMARY.txt over all operators; "" or why not.
  std::string write_overall(const std::vector<op_summary>& ops) const;

private:
  std::string path_;
  std::string backend_;
  settings_lines settings_;
};

/// The text of a per-op summary (what write_op_summary writes).
std::string format_op_summary(const std::string& backend, const settings_lines& settings,
                              const op_summary& s);

/// The text of OVERALL_SUMMARY.txt.
std::string format_overall_summary(const std::string& backend, const settings_lines& settings,
                                   const std::vector<op_summary>& ops);

} // namespace bb
