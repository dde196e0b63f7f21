#pragma once

// Running a program to completion with a time limit, its output to a file: compilers and
// launchers. Blocking: call it from a detached actor or a thread.

#include <string>
#include <vector>

namespace bb {

struct process_result {
  /// Exit status; -1 when it did not exit normally.
  int status = -1;
  bool timed_out = false;
  /// "exited with status 1", "killed by signal 9 (SIGKILL)", or why it could not start.
  std::string how;
  bool ok() const {
    return status == 0 && !timed_out;
  }
};

/// Runs argv[0] (searched in PATH) with stdout and stderr appended to `log_path`, in its own
/// process group; after `timeout_s` the group gets SIGTERM, then SIGKILL. The program gets
/// SIGTERM if the calling thread ends first (the caller was killed).
process_result run_process(const std::vector<std::string>& argv, const std::string& log_path,
                           double timeout_s);

} // namespace bb
