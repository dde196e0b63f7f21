#include "process/subprocess.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <sys/wait.h>

#include "process/runner_supervisor.hpp"
#include "process/spawn.hpp"

namespace bb {

process_result run_process(const std::vector<std::string>& argv, const std::string& log_path,
                           double timeout_s, const sandbox_policy& sandbox) {
  process_result r;
  spawn_spec spec;
  spec.argv = argv;
  spec.in = stdio_spec::null();
  spec.out = stdio_spec::append_to(log_path);
  spec.err = stdio_spec::to_stdout();
  // The program is in a group of its own, out of reach of the terminal's signals: it gets
  // SIGTERM when the thread that started it goes (a killed bbcluster), and the group leader
  // passes that on (the KernelAgent adapter kills its group).
  spec.group = process_group::new_group;
  spec.parent_death_signal = SIGTERM;
  spec.sandbox = sandbox;
  auto child = spawn_process(spec);
  if (!child.ok()) {
    r.how = child.error;
    return r;
  }
  pid_t pid = child.pid;
  int status = 0;
  auto end = wait_for_exit(pid, static_cast<int>(std::clamp(timeout_s * 1000, 0.0, 2e9)), status);
  if (end == wait_outcome::running) {
    r.timed_out = true;
    ::kill(-pid, SIGTERM);
    end = wait_for_exit(pid, 2000, status);
  }
  if (end == wait_outcome::running) {
    ::kill(-pid, SIGKILL);
    end = wait_for_exit(pid, -1, status);
  }
  if (end == wait_outcome::not_a_child) {
    r.how = std::string("waitpid failed: ") + std::strerror(errno);
    return r;
  }
  ::kill(-pid, SIGKILL); // whatever the program left behind in its group
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.how = child.sandboxed ? describe_sandboxed_status(status) : describe_wait_status(status);
  return r;
}

} // namespace bb
