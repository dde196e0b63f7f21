#pragma once

// One bbrunner child process: started in its own process group with a socketpair as its
// channel, stdout and stderr to a log file, core dumps off, and unless its sandbox is off, in
// a sandbox (process/sandbox.hpp). Blocking: use it from a detached actor or a thread.

#include <functional>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "messages/records.hpp"
#include "messages/runner_protocol.hpp"
#include "process/sandbox.hpp"

namespace bb {

struct runner_spec {
  std::string program;
  /// Arguments after the program name; "--fd N" is added.
  std::vector<std::string> args;
  /// Sent to the runner in its configure frame, right after its hello.
  runner_options options;
  /// stdout and stderr of the runner (and so of the kernels) are appended here.
  std::string log_path;
  /// Working folder of the runner; empty: inherit.
  std::string work_dir;
  /// Environment entries ("NAME=value") set for the runner on top of the inherited ones,
  /// which are stripped of secrets first (see is_secret_variable).
  std::vector<std::string> env;
  /// Limit of the runner's private writable memory (RLIMIT_DATA), bytes; 0: none. A kernel
  /// that allocates past it gets an allocation error (oom), not the machine's OOM killer.
  uint64_t memory_limit_bytes = 0;
  /// The runner's sandbox; its mode "off" starts the runner bare. The channel, the log and
  /// the working folder's job folders reach inside it.
  sandbox_policy sandbox;
};

/// From now on no runner of this process starts (start() says why): a sweep stopping now
/// kills its runners, and an evaluator must not start fresh ones behind it.
void refuse_new_runners();

/// Whether refuse_new_runners() was called.
bool new_runners_refused();

class runner_supervisor {
public:
  runner_supervisor() = default;
  runner_supervisor(const runner_supervisor&) = delete;
  runner_supervisor& operator=(const runner_supervisor&) = delete;
  ~runner_supervisor();

  /// Starts the runner and waits up to `timeout_ms` for its hello. Returns an empty string on
  /// success, else why it failed (the process is then gone).
  std::string start(const runner_spec& spec, int timeout_ms);

  /// What one call ended with: a result, or why there is none.
  struct call_outcome {
    bool ok = false;
    eval_result result;
    outcome why = outcome::ok;
    std::string detail;
    /// For reference_error: the input whose reference ran past the call timeout, to be left
    /// out when the job runs again.
    input_failure failed_input;
  };

  /// Sends `job` and waits for its result: at most `call_timeout_ms` between two progress
  /// frames (one call of kernel or reference code) and `job_timeout_ms` in all. On a crash or
  /// a timeout the runner's whole process group is killed and reaped; start() again before
  /// the next call. A reference call past the call timeout is outcome reference_error (with
  /// the input in failed_input), not the kernel's timed_out. `work_dir` is the job's scratch
  /// folder. For a job with a stream_tag, `on_input` gets each input's records as the runner
  /// sends them (runner_reply_kind::input), before the result.
  call_outcome evaluate(const eval_job& job, int call_timeout_ms, int job_timeout_ms,
                        const std::string& work_dir = "", const std::string& jit_entry = "",
                        const std::function<void(const runner_reply&)>& on_input = {});

  /// Asks the runner to allocate, compute and synchronize on its device: "" when it works,
  /// else why not (the runner is then stopped).
  std::string check(int timeout_ms);

  /// Looks `ops` up in the runner's dispatcher: one schema per op, empty when this torch lacks
  /// it. Empty optional (and `error` set) when the runner failed.
  std::optional<std::vector<std::string>> resolve(const std::vector<std::string>& ops,
                                                  int timeout_ms, std::string& error);

  /// Asks the runner to exit, then kills its process group if it does not within a second.
  void stop();

  bool running() const {
    return pid_ > 0;
  }

  /// Whether the runner still runs: one that exited since its last job (as a runner does
  /// after losing its CUDA context) is reaped here.
  bool alive();

  pid_t pid() const {
    return pid_;
  }

  /// The sandbox's first process's /proc folder, opened (a descriptor to close), checked to be
  /// that process by its start time: its "root" is the sandbox's files as the runner sees them
  /// (its private /tmp and scratch folder are not this process's), and stays that process's
  /// even if its number is reused later. -1 for a runner that runs bare or is gone.
  int open_sandbox_proc() const;
  /// Whether the sandbox holds no process but the runner (none that a kernel left behind).
  bool sandbox_holds_only_runner() const;
  /// Provenance the runner announced when it was configured, with how it is sandboxed.
  const provenance& where() const {
    return where_;
  }

private:
  /// Kills the group (SIGTERM, then SIGKILL after `grace_ms`), reaps the child and returns how
  /// it ended, e.g. "killed by signal 9 (SIGKILL)".
  std::string terminate(int grace_ms);

  /// Waits up to `timeout_ms` for the child to exit; returns its description or "".
  std::string reap(int timeout_ms);

  /// After the child (bwrap) has been reaped: kills the sandbox's own first process and waits
  /// until it has ended, which happens only once every process of the sandbox's PID namespace
  /// has (a fork bomb's thousands take a while, and they count against the runner user's
  /// RLIMIT_NPROC: a fresh runner started before then cannot exec).
  void end_sandbox();

  /// The sandbox's first process (bwrap's child, PID 1 of its namespace, in its own session)
  /// and its start time, to tell it from a later process with the same number; -1 if none.
  pid_t inner_pid_ = -1;
  unsigned long long inner_start_ = 0;

  pid_t pid_ = -1;
  int fd_ = -1;
  /// The runner's log, and where this runner's lines begin in it (an earlier runner's are
  /// before): a fatal signal's line is read from there.
  std::string log_path_;
  uint64_t log_from_ = 0;
  /// The runner runs inside bwrap, which reports its death by signal N as exit 128 + N.
  bool sandboxed_ = false;
  /// Bound of setup steps (loading a kernel): the start timeout.
  int setup_timeout_ms_ = 60000;
  provenance where_;
};

/// The last "bbrunner: fatal signal ..." line bbrunner's handler wrote to `log_path` past byte
/// `from`, without its leading "bbrunner: " and its stack: "fatal signal 11 at address ...,
/// instruction ... in MODULE + OFFSET, ...; bbrunner was STEP". "" when there is none.
std::string fatal_signal_line(const std::string& log_path, uint64_t from);

/// "killed by signal 11 (SIGSEGV)" or "exited with status 3" for a wait status.
std::string describe_wait_status(int status);

/// Whether an environment variable may hold a secret that kernel code must never see: names
/// with KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH in them (any case).
bool is_secret_variable(const std::string& name);

} // namespace bb
