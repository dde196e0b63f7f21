#pragma once

// Running a program to completion with a time limit, its output to a file: compilers and
// launchers. Blocking: call it from a detached actor or a thread.

#include <string>
#include <vector>

#include "process/sandbox.hpp"

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
/// SIGTERM if the calling thread ends first (the caller was killed). Unless the sandbox's
/// mode is off, the program runs under its limits and, where namespaces work, in it; a
/// "required" sandbox that cannot run here leaves the program unstarted (`how` says why).
process_result run_process(const std::vector<std::string>& argv, const std::string& log_path,
                           double timeout_s, const sandbox_policy& sandbox = {});

} // namespace bb
