#include "process/spawn.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bb {

namespace {

// The step of the child that failed, as the child reports it through the error pipe.
enum class child_step : int { group, redirect, keep, close, work_dir, exec };

struct child_report {
  int step = 0;
  int error = 0;
};

std::string step_text(child_step s, const spawn_spec& spec) {
  switch (s) {
    case child_step::group:
      return spec.group == process_group::new_session ? "setsid" : "setpgid";
    case child_step::redirect: return "redirecting its standard descriptors";
    case child_step::keep: return "keeping its descriptors open";
    case child_step::close: return "closing the other descriptors";
    case child_step::work_dir: return "entering " + spec.work_dir;
    case child_step::exec: return "exec";
  }
  return "?";
}

// Descriptors the parent opened for the child: closed when spawning returns, whatever happens.
struct owned_fds {
  std::vector<int> fds;
  ~owned_fds() {
    close_all();
  }
  void close_all() {
    for (int fd : fds)
      ::close(fd);
    fds.clear();
  }
  int add(int fd) {
    fds.push_back(fd);
    return fd;
  }
};

// What the child does between fork and exec; everything it touches was made before fork, and
// it calls only async-signal-safe functions.
struct child_plan {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* work_dir = nullptr;
  // Sources of descriptors 0, 1, 2: -1 inherits; stderr_to_stdout makes 2 a copy of 1.
  int stdio[3] = {-1, -1, -1};
  bool stderr_to_stdout = false;
  // Kept descriptors and the error pipe's end, sorted: everything else above 2 is closed.
  const int* keep = nullptr;
  size_t keep_count = 0;
  const rlimit_setting* rlimits = nullptr;
  size_t rlimit_count = 0;
  process_group group = process_group::inherit;
  int parent_death_signal = 0;
  pid_t parent = 0;
  int report_fd = -1;
};

[[noreturn]] void fail(const child_plan& plan, child_step step, int error) {
  child_report r{static_cast<int>(step), error};
  // A short write to a pipe is atomic; the parent reads the whole report or nothing.
  while (::write(plan.report_fd, &r, sizeof(r)) < 0 && errno == EINTR) {
  }
  ::_exit(127);
}

bool kept(const child_plan& plan, int fd) {
  return std::binary_search(plan.keep, plan.keep + plan.keep_count, fd);
}

// Where close_range is missing (Linux before 5.9): the open descriptors as /proc lists them,
// read with getdents64 into a buffer on the stack.
bool close_listed_fds(const child_plan& plan) {
  int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return false;
  alignas(dirent64) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0)
      break;
    for (long at = 0; at < n;) {
      auto* e = reinterpret_cast<dirent64*>(buf + at);
      at += e->d_reclen;
      int fd = 0;
      const char* c = e->d_name;
      if (*c < '0' || *c > '9')
        continue;
      for (; *c >= '0' && *c <= '9'; ++c)
        fd = fd * 10 + (*c - '0');
      if (fd > 2 && fd != dir && !kept(plan, fd))
        ::close(fd);
    }
  }
  ::close(dir);
  return true;
}

bool close_other_fds(const child_plan& plan) {
  unsigned int low = 3;
  for (size_t i = 0; i < plan.keep_count; ++i) {
    auto k = static_cast<unsigned int>(plan.keep[i]);
    if (k > low && ::close_range(low, k - 1, 0) != 0)
      return close_listed_fds(plan);
    low = std::max(low, k + 1);
  }
  if (::close_range(low, ~0u, 0) != 0)
    return close_listed_fds(plan);
  return true;
}

[[noreturn]] void run_child(child_plan& plan) {
  // Every signal at its default action (an ignored one would survive exec); they stay
  // blocked, as the parent blocked them around fork, until just before exec.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::sigaction(sig, &dfl, nullptr); // the C library's own signals refuse: harmless
  if (plan.group == process_group::new_group && ::setpgid(0, 0) != 0)
    fail(plan, child_step::group, errno);
  if (plan.group == process_group::new_session && ::setsid() < 0)
    fail(plan, child_step::group, errno);
  if (plan.parent_death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, plan.parent_death_signal);
    if (::getppid() != plan.parent) // the parent died before the line above
      ::_exit(127);
  }
  // A source among 0..2 that another descriptor would overwrite moves above 2 first.
  for (int i = 0; i < 3; ++i)
    if (plan.stdio[i] >= 0 && plan.stdio[i] < 3 && plan.stdio[i] != i) {
      plan.stdio[i] = ::fcntl(plan.stdio[i], F_DUPFD_CLOEXEC, 3);
      if (plan.stdio[i] < 0)
        fail(plan, child_step::redirect, errno);
    }
  for (int i = 0; i < 3; ++i) {
    int from = plan.stdio[i];
    if (from < 0)
      continue;
    if ((from == i ? ::fcntl(i, F_SETFD, 0) : ::dup2(from, i)) < 0)
      fail(plan, child_step::redirect, errno);
  }
  if (plan.stderr_to_stdout && ::dup2(1, 2) < 0)
    fail(plan, child_step::redirect, errno);
  for (size_t i = 0; i < plan.keep_count; ++i)
    if (plan.keep[i] != plan.report_fd && ::fcntl(plan.keep[i], F_SETFD, 0) != 0)
      fail(plan, child_step::keep, errno);
  if (!close_other_fds(plan))
    fail(plan, child_step::close, errno);
  for (size_t i = 0; i < plan.rlimit_count; ++i) {
    rlimit r{plan.rlimits[i].value, plan.rlimits[i].value};
    ::setrlimit(plan.rlimits[i].resource, &r);
  }
  if (plan.work_dir && ::chdir(plan.work_dir) != 0)
    fail(plan, child_step::work_dir, errno);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.program, plan.argv, plan.envp);
  fail(plan, child_step::exec, errno);
}

// The child's end of one standard descriptor, opened here; the parent's end of a pipe goes to
// `parent_end`. "" or why not.
std::string open_source(const stdio_spec& s, int target, owned_fds& child_ends, int& source,
                        int& parent_end) {
  switch (s.how) {
    case stdio_spec::kind::inherit:
      return "";
    case stdio_spec::kind::to_stdout:
      return target == 2 ? "" : "only stderr can go to stdout";
    case stdio_spec::kind::descriptor:
      if (s.fd < 0 || ::fcntl(s.fd, F_GETFD) < 0)
        return "descriptor " + std::to_string(s.fd) + " is not open";
      source = s.fd;
      return "";
    case stdio_spec::kind::null:
      source = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      if (source < 0)
        return std::string("cannot open /dev/null: ") + std::strerror(errno);
      child_ends.add(source);
      return "";
    case stdio_spec::kind::append:
      source = ::open(s.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (source < 0)
        return "cannot open " + s.path + ": " + std::strerror(errno);
      child_ends.add(source);
      return "";
    case stdio_spec::kind::pipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0)
        return std::string("pipe failed: ") + std::strerror(errno);
      source = child_ends.add(target == 0 ? p[0] : p[1]);
      parent_end = target == 0 ? p[1] : p[0];
      return "";
    }
  }
  return "unknown redirection";
}

// The sandbox's limits as settings, core dumps off first.
void add_sandbox_limits(const sandbox_limits& l, std::vector<rlimit_setting>& out) {
  out.push_back({RLIMIT_CORE, 0});
  for (auto [resource, value] : {std::pair<int, uint64_t>{RLIMIT_NPROC, l.max_processes},
                                 {RLIMIT_FSIZE, l.max_file_bytes},
                                 {RLIMIT_NOFILE, l.max_open_files},
                                 {RLIMIT_DATA, l.max_data_bytes}})
    if (value != 0)
      out.push_back({resource, value});
}

std::string path_of(const std::optional<std::vector<std::string>>& env) {
  if (env) {
    for (auto& e : *env)
      if (e.rfind("PATH=", 0) == 0)
        return e.substr(5);
  } else if (const char* p = std::getenv("PATH")) {
    return p;
  }
  return "/bin:/usr/bin"; // execvp's default
}

} // namespace

std::string find_in_path(const std::string& name, const std::string& path_list) {
  size_t start = 0;
  while (start <= path_list.size()) {
    auto end = path_list.find(':', start);
    auto dir = path_list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) {
      auto candidate = dir + "/" + name;
      struct stat st {};
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)
          && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return "";
}

wait_outcome wait_for_exit(pid_t pid, int timeout_ms, int& status) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pid_t r = ::waitpid(pid, &status, timeout_ms < 0 ? 0 : WNOHANG);
    if (r == pid)
      return wait_outcome::ended;
    if (r < 0 && errno != EINTR)
      return wait_outcome::not_a_child;
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline)
      return wait_outcome::running;
    if (r == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

spawned_process spawn_process(const spawn_spec& spec) {
  spawned_process out;
  if (spec.argv.empty()) {
    out.error = "nothing to run: no program named";
    return out;
  }
  auto fail_with = [&](const std::string& why) {
    out.in = out.out = out.err = -1; // closed by their owner on the way out
    out.error = "cannot run " + spec.argv[0] + ": " + why;
    return out;
  };
  // An ignored SIGCHLD (inherited from a launcher) makes the kernel reap children itself, and
  // then no exit status can be read: restore the default before the first child.
  struct sigaction current {};
  if (::sigaction(SIGCHLD, nullptr, &current) == 0 && current.sa_handler == SIG_IGN)
    ::signal(SIGCHLD, SIG_DFL);

  std::vector<std::string> words = spec.argv;
  std::vector<rlimit_setting> limits;
  auto sandbox = decide_sandbox(spec.sandbox.mode);
  if (!sandbox.refusal.empty()) {
    out.error = sandbox.refusal;
    return out;
  }
  if (sandbox.wrap)
    words = sandbox_command(spec.sandbox, words, bwrap_program(), ::geteuid() == 0);
  if (spec.sandbox.mode != sandbox_mode::off)
    add_sandbox_limits(spec.sandbox.limits, limits);
  limits.insert(limits.end(), spec.rlimits.begin(), spec.rlimits.end());
  out.sandboxed = sandbox.wrap;
  out.sandbox_label = sandbox.label;

  auto program = words[0];
  if (program.find('/') == std::string::npos) {
    program = find_in_path(words[0], path_of(spec.env));
    if (program.empty())
      return fail_with("not found in PATH");
  }
  for (int fd : spec.keep_fds)
    if (fd < 3 || ::fcntl(fd, F_GETFD) < 0)
      return fail_with("descriptor " + std::to_string(fd) + " to keep is "
                       + (fd < 3 ? "a standard one" : "not open"));

  // Everything the child needs, made before fork: after it, only async-signal-safe calls.
  owned_fds child_ends;
  owned_fds parent_ends;
  child_plan plan;
  int* parent_end[3] = {&out.in, &out.out, &out.err};
  const stdio_spec* stdio[3] = {&spec.in, &spec.out, &spec.err};
  for (int i = 0; i < 3; ++i) {
    if (auto why = open_source(*stdio[i], i, child_ends, plan.stdio[i], *parent_end[i]); !why.empty())
      return fail_with(why);
    if (*parent_end[i] >= 0)
      parent_ends.add(*parent_end[i]);
  }
  plan.stderr_to_stdout = spec.err.how == stdio_spec::kind::to_stdout;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    return fail_with(std::string("pipe failed: ") + std::strerror(errno));
  // A parent without its standard descriptors gets one of their numbers here, which the
  // child's redirections would take over: the writing end moves above them.
  if (report[1] < 3) {
    int moved = ::fcntl(report[1], F_DUPFD_CLOEXEC, 3);
    auto why = std::string("pipe failed: ") + std::strerror(errno);
    ::close(report[1]);
    report[1] = moved;
    if (moved < 0) {
      ::close(report[0]);
      return fail_with(why);
    }
  }
  child_ends.add(report[1]);
  std::vector<int> keep = spec.keep_fds;
  keep.push_back(report[1]);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  std::vector<char*> argv;
  for (auto& w : words)
    argv.push_back(w.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (spec.env) {
    for (auto& e : *spec.env)
      envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  plan.program = program.c_str();
  plan.argv = argv.data();
  plan.envp = spec.env ? envp.data() : environ;
  plan.work_dir = spec.work_dir.empty() ? nullptr : spec.work_dir.c_str();
  plan.keep = keep.data();
  plan.keep_count = keep.size();
  plan.rlimits = limits.data();
  plan.rlimit_count = limits.size();
  plan.group = spec.group;
  plan.parent_death_signal = spec.parent_death_signal;
  plan.parent = ::getpid();
  plan.report_fd = report[1];

  // No handler of this process may run in the child: every signal stays blocked across fork
  // until the child has reset them.
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid = ::fork();
  if (pid == 0)
    run_child(plan);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    ::close(report[0]);
    return fail_with(std::string("fork failed: ") + std::strerror(fork_errno));
  }
  // Closes the child's ends (the report pipe's writing end with them), so that the read below
  // ends at the child's exec.
  child_ends.close_all();
  child_report r;
  ssize_t n;
  while ((n = ::read(report[0], &r, sizeof(r))) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(r))) {
    ::waitpid(pid, nullptr, 0);
    auto step = static_cast<child_step>(r.step);
    auto what = step_text(step, spec);
    if (step == child_step::exec && program != spec.argv[0])
      what += " of " + program; // found in PATH, or bwrap around it
    return fail_with(what + " failed: " + std::strerror(r.error) + " (errno "
                     + std::to_string(r.error) + ")");
  }
  parent_ends.fds.clear(); // the caller's now
  out.pid = pid;
  return out;
}

} // namespace bb
