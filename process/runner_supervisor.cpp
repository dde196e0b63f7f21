#include "process/runner_supervisor.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "messages/runner_protocol.hpp"
#include "process/frames.hpp"
#include "process/proc.hpp"
#include "process/spawn.hpp"

namespace bb {

namespace {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal " + std::to_string(sig);
  }
}

} // namespace

std::string fatal_signal_line(const std::string& log_path, uint64_t from) {
  if (log_path.empty())
    return "";
  std::ifstream in(log_path, std::ios::binary);
  if (!in)
    return "";
  in.seekg(0, std::ios::end);
  auto end = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  // The last 256 KiB of this runner's lines at most: the line comes before the stack it
  // introduces, which a kernel's own output does not follow.
  auto begin = std::max(from, end > (uint64_t{256} << 10) ? end - (uint64_t{256} << 10) : uint64_t{0});
  if (begin >= end)
    return "";
  in.seekg(static_cast<std::streamoff>(begin));
  std::string found;
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("bbrunner: fatal signal ");
    if (at != std::string::npos)
      found = line.substr(at + 10);
  }
  auto stack = found.find("; native stack:");
  if (stack != std::string::npos)
    found.erase(stack);
  return found.size() > 400 ? found.substr(0, 400) + "..." : found;
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " ("
           + signal_name(WTERMSIG(status)) + ")";
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended with wait status " + std::to_string(status);
}

bool is_secret_variable(const std::string& name) {
  std::string upper;
  for (char c : name)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (auto word : {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"})
    if (upper.find(word) != std::string::npos)
      return true;
  return false;
}

runner_supervisor::~runner_supervisor() {
  stop();
}

namespace {
std::atomic<bool> refusing_runners{false};
} // namespace

void refuse_new_runners() {
  refusing_runners = true;
}

bool new_runners_refused() {
  return refusing_runners;
}

std::string runner_supervisor::start(const runner_spec& spec, int timeout_ms) {
  stop();
  if (refusing_runners)
    return "no new runner: the sweep is stopping";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return std::string("socketpair failed: ") + std::strerror(errno);
  spawn_spec child;
  child.argv = {spec.program};
  child.argv.insert(child.argv.end(), spec.args.begin(), spec.args.end());
  child.argv.insert(child.argv.end(), {"--fd", std::to_string(sv[1])});
  // The runner's environment: the inherited one without secrets, then the spec's entries.
  child.env.emplace();
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!is_secret_variable(entry.substr(0, entry.find('='))))
      child.env->push_back(entry);
  }
  child.env->insert(child.env->end(), spec.env.begin(), spec.env.end());
  child.work_dir = spec.work_dir;
  child.in = stdio_spec::null();
  child.out = stdio_spec::append_to(spec.log_path);
  log_path_ = spec.log_path;
  {
    std::error_code ec;
    auto size = std::filesystem::file_size(spec.log_path, ec);
    log_from_ = ec ? 0 : size; // this runner's lines start here
  }
  child.err = stdio_spec::to_stdout();
  child.keep_fds = {sv[1]};
  child.group = process_group::new_group;
  child.rlimits.push_back({RLIMIT_CORE, 0});
  if (spec.memory_limit_bytes > 0)
    child.rlimits.push_back({RLIMIT_DATA, spec.memory_limit_bytes});
  child.sandbox = spec.sandbox;
  child.sandbox.limits.max_data_bytes = spec.memory_limit_bytes;
  auto started = spawn_process(child);
  ::close(sv[1]);
  if (!started.ok()) {
    ::close(sv[0]);
    return started.error;
  }
  pid_ = started.pid;
  fd_ = sv[0];
  sandboxed_ = started.sandboxed;
  setup_timeout_ms_ = timeout_ms;
  if (refusing_runners) { // refused while it was being spawned: the halt's kill may have missed it
    stop();
    return "no new runner: the sweep is stopping";
  }
  std::string frame;
  auto st = frames::read_frame(fd_, frame, timeout_ms);
  if (st != frames::read_status::ok) {
    auto how = st == frames::read_status::timeout ? terminate(500) : reap(2000);
    return "runner " + spec.program + " did not start"
           + (st == frames::read_status::timeout ? " (no hello in time)" : "") + ": " + how
           + " (see " + spec.log_path + ")";
  }
  // bwrap has forked the sandbox's first process by now (the runner inside said hello).
  if (sandboxed_)
    if (auto inner = children_of(pid_); !inner.empty()) {
      inner_pid_ = inner.front().pid;
      inner_start_ = inner.front().start;
    }
  try {
    auto hello = unpack<runner_reply>(frame);
    if (hello.kind != runner_reply_kind::hello || hello.protocol != protocol_version) {
      terminate(500);
      return "runner speaks protocol " + std::to_string(hello.protocol) + ", expected "
             + std::to_string(protocol_version);
    }
  } catch (const std::exception& e) {
    terminate(500);
    return std::string("malformed hello from runner: ") + e.what();
  }
  runner_request configure;
  configure.kind = runner_request_kind::configure;
  configure.options = spec.options;
  if (!frames::write_frame(fd_, pack(configure))
      || frames::read_frame(fd_, frame, timeout_ms) != frames::read_status::ok)
    return "runner " + spec.program + " was not configured: " + terminate(500) + " (see "
           + spec.log_path + ")";
  try {
    auto ready = unpack<runner_reply>(frame);
    if (ready.kind != runner_reply_kind::ready) {
      terminate(500);
      return std::string("runner answered '") + to_string(ready.kind) + "' to configure";
    }
    where_ = ready.where;
    where_.sandbox = started.sandbox_label;
  } catch (const std::exception& e) {
    terminate(500);
    return std::string("malformed answer to configure: ") + e.what();
  }
  return "";
}

namespace {

std::string seconds_text(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", ms / 1000.0);
  return buf;
}

} // namespace

runner_supervisor::call_outcome runner_supervisor::evaluate(const eval_job& job, int call_timeout_ms,
                                                      int job_timeout_ms, const std::string& work_dir,
                                                      const std::string& jit_entry,
                                                      const std::function<void(const runner_reply&)>& on_input) {
  call_outcome out;
  if (!running()) {
    out.why = outcome::infra_error;
    out.detail = "runner is not running";
    return out;
  }
  runner_request req;
  req.kind = runner_request_kind::evaluate;
  req.job = job;
  req.work_dir = work_dir;
  req.jit_entry = jit_entry;
  if (!frames::write_frame(fd_, pack(req))) {
    out.why = outcome::crashed;
    out.detail = "runner " + reap(2000);
    return out;
  }
  using clock = std::chrono::steady_clock;
  auto job_deadline = clock::now() + std::chrono::milliseconds(job_timeout_ms);
  std::string step = "starting the job";
  runner_reply last_step;
  int step_timeout_ms = call_timeout_ms;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(job_deadline - clock::now());
    bool job_bound = left.count() < step_timeout_ms;
    int wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), step_timeout_ms)));
    std::string frame;
    auto st = frames::read_frame(fd_, frame, wait_ms);
    if (st == frames::read_status::timeout && !job_bound && last_step.side == code_side::reference) {
      // The reference (aten) itself is too slow here: that input is left out, as BackendBench
      // leaves out inputs whose reference fails. Not the kernel's failure.
      out.why = outcome::reference_error;
      out.failed_input.kind = last_step.input;
      out.failed_input.index = last_step.input_index;
      out.failed_input.message = "the reference ran past the call timeout ("
                                 + seconds_text(step_timeout_ms) + ") during " + step;
      out.detail = out.failed_input.message + "; runner " + terminate(1000);
      return out;
    }
    if (st == frames::read_status::timeout) {
      out.why = outcome::timed_out;
      out.detail = (job_bound ? "the job ran past its timeout (" + seconds_text(job_timeout_ms)
                              : "one call ran past the call timeout (" + seconds_text(step_timeout_ms))
                   + ") during " + step + "; runner " + terminate(1000);
      return out;
    }
    if (st != frames::read_status::ok) {
      auto how = reap(2000);
      // aten itself faulted on this input (an input it does not check, as an index out of
      // range): the input is left out, as BackendBench leaves out inputs whose reference
      // fails. A runner killed from outside (SIGKILL, SIGTERM) is a crash whatever it ran.
      bool fault = false;
      for (auto sig : {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"})
        fault = fault || how.find(sig) != std::string::npos;
      if (fault && last_step.side == code_side::reference) {
        out.why = outcome::reference_error;
        out.failed_input.kind = last_step.input;
        out.failed_input.index = last_step.input_index;
        out.failed_input.message = "the reference crashed (runner " + how + ") during " + step;
        out.detail = out.failed_input.message;
        return out;
      }
      out.why = outcome::crashed;
      out.detail = "runner " + how + " during " + step;
      return out;
    }
    try {
      auto reply = unpack<runner_reply>(frame);
      if (reply.kind == runner_reply_kind::progress) {
        step = reply.text;
        last_step = std::move(reply);
        step_timeout_ms = last_step.setup ? std::max(call_timeout_ms, setup_timeout_ms_) : call_timeout_ms;
        continue;
      }
      if (reply.kind == runner_reply_kind::input) {
        // An input that ended: its records, streamed on; the step timing goes on as it was.
        if (on_input && reply.result.job_id == job.job_id)
          on_input(reply);
        continue;
      }
      out.ok = true;
      out.result = std::move(reply.result);
      out.result.where.sandbox = where_.sandbox;
      return out;
    } catch (const std::exception& e) {
      out.why = outcome::infra_error;
      out.detail = std::string("malformed frame from runner: ") + e.what() + "; runner "
                   + terminate(500);
      return out;
    }
  }
}

std::string runner_supervisor::check(int timeout_ms) {
  if (!running())
    return "runner is not running";
  runner_request req;
  req.kind = runner_request_kind::check;
  std::string frame;
  if (!frames::write_frame(fd_, pack(req))
      || frames::read_frame(fd_, frame, timeout_ms) != frames::read_status::ok)
    return "runner " + terminate(500) + " during the device check";
  try {
    auto reply = unpack<runner_reply>(frame);
    if (reply.kind == runner_reply_kind::checked && reply.text.empty())
      return "";
    auto why = reply.kind == runner_reply_kind::checked ? reply.text : std::string("runner answered '") + to_string(reply.kind) + "' to check";
    terminate(500);
    return why;
  } catch (const std::exception& e) {
    terminate(500);
    return std::string("malformed reply to check: ") + e.what();
  }
}

std::optional<std::vector<std::string>> runner_supervisor::resolve(const std::vector<std::string>& ops,
                                                                int timeout_ms, std::string& error) {
  if (!running()) {
    error = "runner is not running";
    return std::nullopt;
  }
  runner_request req;
  req.kind = runner_request_kind::resolve;
  req.ops = ops;
  std::string frame;
  if (!frames::write_frame(fd_, pack(req))
      || frames::read_frame(fd_, frame, timeout_ms) != frames::read_status::ok) {
    error = "runner " + terminate(500);
    return std::nullopt;
  }
  try {
    auto reply = unpack<runner_reply>(frame);
    if (reply.kind != runner_reply_kind::schemas || reply.schemas.size() != ops.size()) {
      error = std::string("runner answered '") + to_string(reply.kind) + "' to resolve";
      return std::nullopt;
    }
    return reply.schemas;
  } catch (const std::exception& e) {
    error = std::string("malformed reply from runner: ") + e.what();
    terminate(500);
    return std::nullopt;
  }
}

bool runner_supervisor::alive() {
  if (!running())
    return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    ::kill(-pid_, SIGKILL);
    ::close(fd_);
    fd_ = -1;
    pid_ = -1;
    end_sandbox();
    return false;
  }
  return true;
}

void runner_supervisor::stop() {
  if (!running())
    return;
  runner_request req;
  req.kind = runner_request_kind::stop;
  frames::write_frame(fd_, pack(req));
  if (reap(1000).empty())
    terminate(1000);
}

std::string runner_supervisor::reap(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      // The group may still hold children of the kernel: end them too.
      auto how = r != pid_ ? std::string("was already reaped")
                 : sandboxed_ ? describe_sandboxed_status(status) : describe_wait_status(status);
      if (how.find("signal") != std::string::npos)
        if (auto said = fatal_signal_line(log_path_, log_from_); !said.empty())
          how += " (its log: " + said + ")";
      ::kill(-pid_, SIGKILL);
      ::close(fd_);
      fd_ = -1;
      pid_ = -1;
      end_sandbox();
      return how;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int runner_supervisor::open_sandbox_proc() const {
  if (!sandboxed_ || inner_pid_ <= 0)
    return -1;
  int fd = ::open(("/proc/" + std::to_string(inner_pid_)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  // The stat read through the descriptor is that process's, whatever has its number now.
  char buf[1024] = {};
  int stat = ::openat(fd, "stat", O_RDONLY | O_CLOEXEC);
  auto n = stat < 0 ? -1 : ::read(stat, buf, sizeof(buf) - 1);
  if (stat >= 0)
    ::close(stat);
  auto st = n > 0 ? parse_proc_stat(std::string(buf, static_cast<size_t>(n))) : std::nullopt;
  if (!st || st->start != inner_start_ || st->state == 'Z' || st->state == 'X') {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool runner_supervisor::sandbox_holds_only_runner() const {
  if (!sandboxed_ || inner_pid_ <= 0)
    return false;
  // The sandbox's first process has one child, the runner, which has none.
  auto first = children_of(inner_pid_);
  return first.size() == 1 && children_of(first.front().pid).empty();
}

void runner_supervisor::end_sandbox() {
  if (inner_pid_ <= 0)
    return;
  // Bounded: a process the kernel cannot end (stuck in the driver) must not stop the slot for
  // good; the fresh runner's start then says what failed.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto st = read_proc_stat(inner_pid_);
    // Gone, a later process with its number, or a zombie: a namespace's first process turns
    // zombie only after every other process of the namespace has been reaped.
    if (!st || st->start != inner_start_ || st->state == 'Z' || st->state == 'X')
      break;
    ::kill(inner_pid_, SIGKILL);
    if (std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  inner_pid_ = -1;
  inner_start_ = 0;
}

std::string runner_supervisor::terminate(int grace_ms) {
  if (!running())
    return "was not running";
  ::kill(-pid_, SIGTERM);
  auto how = reap(grace_ms);
  if (!how.empty())
    return how;
  ::kill(-pid_, SIGKILL);
  how = reap(5000);
  return how.empty() ? "did not die after SIGKILL" : how;
}

} // namespace bb
