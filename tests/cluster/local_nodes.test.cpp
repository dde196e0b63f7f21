#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "cluster/local_nodes.hpp"
#include "process/proc.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A stand-in for bbnode: a shell whose command line reads `bbnode ... --endpoint-file FILE`.
[[noreturn]] void exec_fake_node(const std::string& endpoint_file) {
  ::execl("/bin/sh", "bbnode", "-c", "while :; do sleep 0.05; done", "--endpoint-file",
          endpoint_file.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

bool alive(pid_t pid) {
  auto st = read_proc_stat(pid);
  return st && st->state != 'Z' && st->state != 'X';
}

// Waits until `pid` runs the fake bbnode (it may not have exec'd yet).
bool runs_fake_node(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    auto args = read_proc_cmdline(pid);
    if (!args.empty() && args[0] == "bbnode")
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

bool gone_within(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20 && alive(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !alive(pid);
}

} // namespace

TEST_CASE("nodes of a live coordinator are left alone", "[cluster]") {
  bb::test::temp_dir dir;
  auto nodes = dir / "nodes";
  std::filesystem::create_directories(nodes);
  pid_t node = ::fork();
  if (node == 0)
    exec_fake_node(nodes + "/n1.endpoint");
  REQUIRE(runs_fake_node(node));
  REQUIRE(record_local_node(nodes, "n1", node) == "");
  CHECK(local_node_record_path(nodes, "n1") == nodes + "/n1.pid");
  CHECK(find_left_nodes(nodes).empty()); // this process, its coordinator, runs
  CHECK(end_left_nodes(nodes, 1).empty());
  CHECK(alive(node));
  CHECK(std::filesystem::exists(nodes + "/n1.pid"));
  ::kill(node, SIGKILL);
  ::waitpid(node, nullptr, 0);
  // A record of a node that no longer runs is removed.
  CHECK(end_left_nodes(nodes, 1).empty());
  CHECK_FALSE(std::filesystem::exists(nodes + "/n1.pid"));
}

TEST_CASE("nodes whose coordinator is gone are ended, if they serve the folder", "[cluster]") {
  bb::test::temp_dir dir;
  auto nodes = dir / "run/nodes";
  std::filesystem::create_directories(nodes);
  std::filesystem::create_directories(dir / "elsewhere");
  // The coordinator starts two nodes, records them and dies: n1 serves the folder, n2 (as
  // far as its command line says) another one.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t coordinator = ::fork();
  if (coordinator == 0) {
    pid_t pids[2];
    pids[0] = ::fork();
    if (pids[0] == 0)
      exec_fake_node(nodes + "/n1.endpoint");
    pids[1] = ::fork();
    if (pids[1] == 0)
      exec_fake_node(dir / "elsewhere/n2.endpoint");
    record_local_node(nodes, "n1", pids[0]);
    record_local_node(nodes, "n2", pids[1]);
    (void)!::write(pipe_fds[1], pids, sizeof(pids));
    ::_exit(0);
  }
  pid_t pids[2] = {0, 0};
  REQUIRE(::read(pipe_fds[0], pids, sizeof(pids)) == sizeof(pids));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ::waitpid(coordinator, nullptr, 0);
  REQUIRE(runs_fake_node(pids[0]));
  REQUIRE(runs_fake_node(pids[1]));

  // A record whose start time is not the process's names another process of that number.
  bb::test::write_file(nodes + "/n9.pid", "node " + std::to_string(pids[0]) + " 1\ncoordinator "
                                            + std::to_string(coordinator) + " 1\n");
  auto left = find_left_nodes(nodes);
  REQUIRE(left.size() == 1);
  CHECK(left[0].name == "n1");
  CHECK(left[0].pid == pids[0]);
  CHECK(left[0].coordinator == coordinator);

  auto ended = end_left_nodes(nodes, 5);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].pid == pids[0]);
  CHECK(gone_within(pids[0], 5));
  CHECK_FALSE(std::filesystem::exists(nodes + "/n1.pid"));
  CHECK(alive(pids[1]));
  CHECK(std::filesystem::exists(nodes + "/n2.pid"));
  ::kill(pids[1], SIGKILL);
  CHECK(gone_within(pids[1], 5));
}
