#include <catch2/catch.hpp>

#include <csignal>

#include <sys/wait.h>
#include <unistd.h>

#include "process/proc.hpp"

TEST_CASE("/proc: a process's own stat line, and a child found by its parent", "[core]") {
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
