#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "process/proc.hpp"

TEST_CASE("/proc: a process's own stat line, and a child found by its parent", "[process]") {
  auto self = bb::read_proc_stat(::getpid());
  REQUIRE(self);
  CHECK(self->pid == ::getpid());
  CHECK(self->ppid == ::getppid());
  CHECK(self->name == "bb_unit_tests");
  CHECK(self->start > 0);

  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto children = bb::children_of(::getpid());
  bool found = false;
  for (auto& c : children)
    found = found || (c.pid == child && c.start >= self->start);
  CHECK(found);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(bb::read_proc_stat(child));
}

TEST_CASE("/proc: a process's command line and working folder", "[process]") {
  pid_t child = ::fork();
  if (child == 0) {
    if (::chdir("/tmp") == 0)
      ::execl("/bin/sleep", "sleep-as-named", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::vector<std::string> args;
  for (int i = 0; i < 200 && (args.empty() || args[0] != "sleep-as-named"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    args = bb::read_proc_cmdline(child);
  }
  CHECK(args == std::vector<std::string>{"sleep-as-named", "30"});
  CHECK(bb::read_proc_cwd(child) == "/tmp");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(bb::read_proc_cmdline(child).empty());
  CHECK(bb::read_proc_cwd(child).empty());
}
