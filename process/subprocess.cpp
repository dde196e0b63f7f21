#include "process/subprocess.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process/runner_supervisor.hpp"

namespace bb {

process_result run_process(const std::vector<std::string>& argv, const std::string& log_path,
                           double timeout_s, const sandbox_policy& sandbox) {
  process_result r;
  auto decision = decide_sandbox(sandbox.mode);
  if (!decision.refusal.empty()) {
    r.how = decision.refusal;
    return r;
  }
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    r.how = "cannot open " + log_path + ": " + std::strerror(errno);
    return r;
  }
  std::vector<std::string> words = argv;
  if (decision.wrap)
    words = sandbox_command(sandbox, argv, bwrap_program(), ::geteuid() == 0);
  bool limited = sandbox.mode != sandbox_mode::off;
  std::vector<char*> args;
  for (auto& w : words)
    args.push_back(w.data());
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    r.how = std::string("fork failed: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // The program is in a group of its own, out of reach of the terminal's signals: it gets
    // SIGTERM when the thread that started it goes (a killed bbcluster), and the group
    // leader passes that on (the KernelAgent adapter kills its group).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)
      ::_exit(127);
    if (limited)
      apply_limits(sandbox.limits);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      ::dup2(devnull, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(log_fd);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR) {
      r.how = std::string("waitpid failed: ") + std::strerror(errno);
      return r;
    }
    if (!r.timed_out && std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGTERM);
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      continue;
    }
    if (r.timed_out && std::chrono::steady_clock::now() >= deadline)
      ::kill(-pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid, SIGKILL); // whatever the program left behind in its group
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.how = decision.wrap ? describe_sandboxed_status(status) : describe_wait_status(status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    r.how = "could not run " + argv[0] + " (exit status 127: not found?)";
  return r;
}

} // namespace bb
