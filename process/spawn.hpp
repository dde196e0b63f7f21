#pragma once

// The one way bbcluster starts a child process: a runner, a compiler, a launcher's bbnode,
// bwrap's own check. One spec says what the child gets (program, environment, working folder,
// standard descriptors, descriptors kept open, process group, parent-death signal, resource
// limits, sandbox); spawn_process() prepares everything before fork, so that the child makes
// only async-signal-safe calls, and reports a failure of any step up to exec (with its errno)
// through a close-on-exec pipe. Waiting for the child, killing it and its group stay with the
// caller, who knows what the child is for.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "process/sandbox.hpp"

namespace bb {

/// Where one of the child's standard descriptors (0, 1, 2) goes.
struct stdio_spec {
  enum class kind {
    /// The parent's own descriptor of that number.
    inherit,
    /// /dev/null.
    null,
    /// A file opened for appending (made if missing, mode 0644).
    append,
    /// A pipe; the parent's end is in spawned_process.
    pipe,
    /// A descriptor the parent holds (`fd`), which stays the parent's.
    descriptor,
    /// For stderr only: wherever stdout goes (2>&1).
    to_stdout,
  };
  kind how = kind::inherit;
  std::string path;
  int fd = -1;

  static stdio_spec inherit() {
    return {};
  }
  static stdio_spec null() {
    return {kind::null, "", -1};
  }
  static stdio_spec append_to(std::string file) {
    return {kind::append, std::move(file), -1};
  }
  static stdio_spec pipe() {
    return {kind::pipe, "", -1};
  }
  static stdio_spec descriptor(int fd) {
    return {kind::descriptor, "", fd};
  }
  static stdio_spec to_stdout() {
    return {kind::to_stdout, "", -1};
  }
};

/// The child's process group.
enum class process_group {
  /// The parent's.
  inherit,
  /// A group of its own, led by the child: killing -pid reaches everything it starts, and
  /// the terminal's Ctrl-C does not.
  new_group,
  /// A session (and group) of its own, without a controlling terminal.
  new_session,
};

/// One resource limit, soft and hard alike (setrlimit).
struct rlimit_setting {
  int resource = 0;
  uint64_t value = 0;
};

struct spawn_spec {
  /// The program and its arguments. A program without a '/' is searched in the PATH of the
  /// child's environment.
  std::vector<std::string> argv;
  /// The child's whole environment ("NAME=value"); none: the parent's.
  std::optional<std::vector<std::string>> env;
  /// The child's working folder; empty: the parent's.
  std::string work_dir;
  stdio_spec in;
  stdio_spec out;
  stdio_spec err;
  /// Descriptors the child keeps under their own numbers (above 2: the runner's channel).
  /// Every other descriptor above 2 is closed in the child before exec.
  std::vector<int> keep_fds;
  process_group group = process_group::inherit;
  /// The signal the child gets when the parent's thread that started it ends
  /// (PR_SET_PDEATHSIG); 0: none. A child whose parent is gone before it is set exits.
  int parent_death_signal = 0;
  /// Applied in the child before exec, in order; a limit the process may not raise is left
  /// as it is.
  std::vector<rlimit_setting> rlimits;
  /// Unless its mode is off, the program runs under `sandbox.limits` (core dumps off) and,
  /// where namespaces work, wrapped in bwrap (sandbox_command); a "required" sandbox that
  /// cannot run here starts nothing. The descriptors kept reach inside.
  sandbox_policy sandbox;
};

/// A started child, or why none was.
struct spawned_process {
  pid_t pid = -1;
  /// The parent's ends of the pipes asked for (close-on-exec, the caller's to close); -1 where
  /// none was.
  int in = -1;
  int out = -1;
  int err = -1;
  /// Whether the program runs inside bwrap (which reports the program's death by signal N as
  /// exit 128 + N: describe_sandboxed_status).
  bool sandboxed = false;
  /// How it is sandboxed, for provenance: sandbox_decision::label.
  std::string sandbox_label;
  /// Empty when the child runs the program; else what failed and why, naming the program
  /// ("cannot run /opt/x: exec: No such file or directory"). No child is left then.
  std::string error;

  bool ok() const {
    return error.empty();
  }
};

/// Starts `spec`'s program. Returns once the child has exec'd (or failed to). The child starts
/// with every signal at its default action and none blocked. An ignored SIGCHLD in this
/// process is restored to the default first, else no exit status could be waited for.
spawned_process spawn_process(const spawn_spec& spec);

/// The first `name` in the ':'-separated folders of `path_list` that this process may execute;
/// "" when there is none.
std::string find_in_path(const std::string& name, const std::string& path_list);

/// How waiting for a child came out.
enum class wait_outcome {
  /// It ended and was reaped: the wait status is set.
  ended,
  /// It still runs at the deadline.
  running,
  /// It is not (or no longer) a child of this process: nothing to wait for.
  not_a_child,
};

/// Waits up to `timeout_ms` for child `pid` to end (0: only looks; below 0: as long as it
/// takes) and reaps it, setting `status`.
wait_outcome wait_for_exit(pid_t pid, int timeout_ms, int& status);

} // namespace bb
