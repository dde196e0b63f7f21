#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process/proc.hpp"
#include "process/spawn.hpp"
#include "support.hpp"

namespace {

// Kills a child's group and reaps it when a failed check leaves the test early.
struct child_guard {
  pid_t pid = -1;
  ~child_guard() {
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Everything a child wrote to the parent's end of a pipe, until it closes; then the child is
// reaped.
std::string read_all_and_reap(bb::spawned_process& child, int fd) {
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) != 0)
    if (n > 0)
      text.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  ::close(fd);
  int status = 0;
  CHECK(bb::wait_for_exit(child.pid, 10000, status) == bb::wait_outcome::ended);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return text;
}

// Runs `argv` with stdout to a pipe, the rest as the spec says, and returns what it printed.
std::string output_of(bb::spawn_spec spec) {
  spec.out = bb::stdio_spec::pipe();
  auto child = bb::spawn_process(spec);
  INFO(child.error);
  REQUIRE(child.ok());
  return read_all_and_reap(child, child.out);
}

// A descriptor of `path` that is not close-on-exec: what a careless library leaves open.
int inheritable_fd(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd > 2);
  return fd;
}

} // namespace

TEST_CASE("spawn: a program that cannot run is named with the errno of its exec", "[process]") {
  bb::spawn_spec spec;
  spec.argv = {"/no/such/program", "--flag"};
  auto child = bb::spawn_process(spec);
  CHECK_FALSE(child.ok());
  CHECK(child.pid == -1);
  CHECK_THAT(child.error, Catch::Contains("/no/such/program"));
  CHECK_THAT(child.error, Catch::Contains("exec failed"));
  CHECK_THAT(child.error, Catch::Contains(std::strerror(ENOENT)));
  CHECK_THAT(child.error, Catch::Contains("errno " + std::to_string(ENOENT)));

  bb::test::temp_dir dir;
  bb::test::write_file(dir / "not-executable", "#!/bin/sh\n");
  spec.argv = {dir / "not-executable"};
  child = bb::spawn_process(spec);
  CHECK_THAT(child.error, Catch::Contains(std::strerror(EACCES)));

  // Searched in the child's PATH, not the parent's.
  spec.argv = {"sh", "-c", "true"};
  spec.env = std::vector<std::string>{"PATH=" + dir.path};
  child = bb::spawn_process(spec);
  CHECK(child.error == "cannot run sh: not found in PATH");

  spec.env.reset();
  spec.work_dir = dir / "missing";
  child = bb::spawn_process(spec);
  CHECK_THAT(child.error, Catch::Contains("entering " + dir / "missing"));
  CHECK_THAT(child.error, Catch::Contains(std::strerror(ENOENT)));
  // Each failed child was reaped: none is left.
  CHECK(bb::children_of(::getpid()).empty());
}

TEST_CASE("spawn: only the descriptors asked for stay open in the child", "[process]") {
  bb::test::temp_dir dir;
  int leaked = inheritable_fd(dir / "leaked");
  int kept = inheritable_fd(dir / "kept");
  bb::spawn_spec spec;
  spec.argv = {"ls", "-ln", "/proc/self/fd"};
  spec.in = bb::stdio_spec::null();
  spec.keep_fds = {kept};
  auto listing = output_of(spec);
  ::close(leaked);
  ::close(kept);
  INFO(listing);
  // "lrwx------ 1 1000 1000 64 Jan 1 00:00 3 -> /path": each descriptor and what it is.
  std::map<int, std::string> open;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    auto arrow = line.find(" -> ");
    if (arrow == std::string::npos)
      continue;
    auto number = line.rfind(' ', arrow - 1);
    open[std::stoi(line.substr(number + 1, arrow - number - 1))] = line.substr(arrow + 4);
  }
  // ls's own descriptor of the folder it lists is the only one it opened.
  for (auto it = open.begin(); it != open.end();)
    it = it->second.rfind("/proc/", 0) == 0 && it->first > 2 ? open.erase(it) : std::next(it);
  CHECK(open.size() == 4);
  CHECK(open.count(0));
  CHECK(open.count(1));
  CHECK(open.count(2));
  CHECK(open[kept] == dir / "kept");
  for (auto& entry : open)
    CHECK(entry.second != dir / "leaked");
}

TEST_CASE("spawn: a child in a new group is reached with everything it started by a group kill",
          "[process]") {
  bb::spawn_spec spec;
  spec.argv = {"sh", "-c", "sleep 30 & echo started; wait"};
  spec.in = bb::stdio_spec::null();
  spec.out = bb::stdio_spec::pipe();
  spec.group = bb::process_group::new_group;
  auto child = bb::spawn_process(spec);
  REQUIRE(child.ok());
  child_guard guard{child.pid};
  CHECK(::getpgid(child.pid) == child.pid);
  CHECK(::getpgid(child.pid) != ::getpgrp());
  char buf[16];
  REQUIRE(::read(child.out, buf, sizeof(buf)) > 0); // the sleep runs
  ::close(child.out);
  auto grandchildren = bb::children_of(child.pid);
  REQUIRE(grandchildren.size() == 1);
  auto sleeper = grandchildren.front();
  CHECK(::getpgid(sleeper.pid) == child.pid);

  ::kill(-child.pid, SIGTERM);
  int status = 0;
  REQUIRE(bb::wait_for_exit(child.pid, 10000, status) == bb::wait_outcome::ended);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  // The sleep, reparented, is gone or a zombie waiting for its new parent.
  bool ended = false;
  for (int i = 0; i < 200 && !ended; ++i) {
    auto st = bb::read_proc_stat(sleeper.pid);
    ended = !st || st->start != sleeper.start || st->state == 'Z' || st->state == 'X';
    if (!ended)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(ended);

  // Without a group of its own, the child is in ours; with a session, it leads both.
  bb::spawn_spec other;
  other.argv = {"sleep", "30"};
  for (auto group : {bb::process_group::inherit, bb::process_group::new_session}) {
    other.group = group;
    auto plain = bb::spawn_process(other);
    REQUIRE(plain.ok());
    child_guard plain_guard{plain.pid};
    bool own = group == bb::process_group::new_session;
    CHECK((::getpgid(plain.pid) == plain.pid) == own);
    CHECK((::getsid(plain.pid) == plain.pid) == own);
    CHECK((::getpgid(plain.pid) == ::getpgrp()) == !own);
    ::kill(plain.pid, SIGKILL);
    CHECK(bb::wait_for_exit(plain.pid, 10000, status) == bb::wait_outcome::ended);
  }
}

TEST_CASE("spawn: stdout and stderr go to a file, to a pipe, or together", "[process]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "log", "before\n");
  bb::spawn_spec spec;
  spec.argv = {"sh", "-c", "echo out; echo err >&2"};
  spec.out = bb::stdio_spec::append_to(dir / "log");
  spec.err = bb::stdio_spec::pipe();
  auto child = bb::spawn_process(spec);
  REQUIRE(child.ok());
  CHECK(child.out == -1);
  CHECK(read_all_and_reap(child, child.err) == "err\n");
  CHECK(bb::test::read_file(dir / "log") == "before\nout\n");

  spec.out = bb::stdio_spec::append_to(dir / "log");
  spec.err = bb::stdio_spec::to_stdout();
  child = bb::spawn_process(spec);
  REQUIRE(child.ok());
  int status = 0;
  CHECK(bb::wait_for_exit(child.pid, 10000, status) == bb::wait_outcome::ended);
  CHECK(bb::test::read_file(dir / "log") == "before\nout\nout\nerr\n");

  // stdin from a pipe, stdout to another.
  spec.argv = {"cat"};
  spec.in = bb::stdio_spec::pipe();
  spec.out = bb::stdio_spec::pipe();
  spec.err = bb::stdio_spec::inherit();
  child = bb::spawn_process(spec);
  REQUIRE(child.ok());
  REQUIRE(::write(child.in, "through\n", 8) == 8);
  ::close(child.in);
  CHECK(read_all_and_reap(child, child.out) == "through\n");

  spec.out = bb::stdio_spec::append_to(dir / "no-such-folder/log");
  child = bb::spawn_process(spec);
  CHECK_THAT(child.error, Catch::Contains("cannot open " + dir / "no-such-folder/log"));
  CHECK(child.in == -1);
}

TEST_CASE("spawn: the child starts with no signal blocked or ignored", "[process]") {
  sigset_t usr1, before;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &usr1, &before);
  auto usr2 = std::signal(SIGUSR2, SIG_IGN);
  bb::spawn_spec spec;
  // grep reads its own status.
  spec.argv = {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"};
  auto status = output_of(spec);
  std::signal(SIGUSR2, usr2);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  CHECK(status == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST_CASE("spawn: the environment, working folder and limits are the spec's", "[process]") {
  bb::test::temp_dir dir;
  ::setenv("BB_SPAWN_PARENT_ONLY", "parent", 1);
  bb::spawn_spec spec;
  spec.argv = {"sh", "-c", "echo \"$BB_SPAWN_CHILD:$BB_SPAWN_PARENT_ONLY\"; pwd; ulimit -n; ulimit -c"};
  spec.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "BB_SPAWN_CHILD=child"};
  spec.work_dir = dir.path;
  spec.rlimits = {{RLIMIT_NOFILE, 64}, {RLIMIT_CORE, 0}};
  CHECK(output_of(spec) == "child:\n" + dir.path + "\n64\n0\n");
  // Without an environment of its own, the child has the parent's.
  spec.env.reset();
  spec.work_dir.clear();
  spec.rlimits.clear();
  spec.argv = {"sh", "-c", "echo \"$BB_SPAWN_PARENT_ONLY\""};
  CHECK(output_of(spec) == "parent\n");
  ::unsetenv("BB_SPAWN_PARENT_ONLY");
}

TEST_CASE("spawn: the parent-death signal ends the child with the thread that started it",
          "[process]") {
  bb::spawned_process child;
  std::thread starter([&] {
    bb::spawn_spec spec;
    spec.argv = {"sleep", "30"};
    spec.parent_death_signal = SIGTERM;
    child = bb::spawn_process(spec);
  });
  starter.join();
  REQUIRE(child.ok());
  child_guard guard{child.pid};
  int status = 0;
  REQUIRE(bb::wait_for_exit(child.pid, 10000, status) == bb::wait_outcome::ended);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}
