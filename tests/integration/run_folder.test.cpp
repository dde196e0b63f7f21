// A run folder and what owns it: one sweep at a time (a lock naming its holder), the nodes of a
// killed sweep ended (with their coordinator, or by the next sweep on the folder), a resumed
// sweep's recorded command that runs again, a journal cut mid-line that resumes, a hostfile
// naming one node twice, and keygen that keeps existing keys.

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cluster/local_nodes.hpp"
#include "process/proc.hpp"
#include "programs.hpp"

using bb::test::children_named;
using bb::test::journal_lines;
using bb::test::run;
using bb::test::wait_exit;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string bbnode = BB_BIN_DIR "/bbnode";

using bb::test::nine_ops;

const char* slow_settings =
  "[nodes]\nheartbeat_s = 0.3\nsilence_s = 2.0\n"
  "[timing]\ncpu_warmup = 2\ncpu_runs = 100\ncpu_max_seconds = 0.5\n";

// The nine operators' sweep into dir/run, with `more` flags.
std::vector<std::string> slow_sweep(const bb::test::temp_dir& dir, std::vector<std::string> more = {}) {
  bb::test::write_file(dir / "ops.txt", nine_ops);
  bb::test::write_file(dir / "settings.toml", slow_settings);
  std::vector<std::string> words = {bbcluster, "--suite", "torchbench", "--data", dir / "ops.txt", "--config",
                                    dir / "settings.toml", "--log-dir", dir / "run", "--quiet"};
  words.insert(words.end(), more.begin(), more.end());
  return words;
}

// Starts `words` in the background, its output to dir/stdout and dir/stderr.
pid_t start(const bb::test::temp_dir& dir, std::vector<std::string> words) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen((dir / "stdout").c_str(), "w", stdout);
    std::freopen((dir / "stderr").c_str(), "w", stderr);
    std::vector<char*> argv;
    for (auto& w : words)
      argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (auto& w : words)
    out += (out.empty() ? "" : " ") + w;
  return out;
}

bool alive(pid_t pid) {
  auto st = bb::read_proc_stat(pid);
  return st && st->state != 'Z' && st->state != 'X';
}

bool gone_within(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20 && alive(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !alive(pid);
}

// Waits up to `seconds` for the journal of dir/run to have a line.
bool journal_started(const bb::test::temp_dir& dir, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (!journal_lines(dir / "run/results.jsonl").empty())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

} // namespace

TEST_CASE("a second sweep on a folder in use is refused with the holder's pid, and waits for none",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::temp_dir other; // the second sweep's own output
  auto words = slow_sweep(dir);
  pid_t first = start(dir, words);
  auto holder = "pid " + std::to_string(first);
  for (int i = 0; i < 600 && bb::test::read_file(dir / "run/.lock").find(holder) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(bb::test::read_file(dir / "run/.lock").find(holder) == 0);

  auto t0 = std::chrono::steady_clock::now();
  auto second = run(other, joined(words));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  CHECK(second.status == 2);
  CHECK_THAT(second.err, Catch::Contains(dir / "run is in use by another sweep (" + holder + ": bbcluster "));
  CHECK_THAT(second.err, Catch::Contains("--log-dir " + dir / "run"));

  // --resume takes the lock too (once the folder has a journal to resume from).
  REQUIRE(journal_started(dir, 120));
  REQUIRE(::waitpid(first, nullptr, WNOHANG) == 0); // still running
  auto resume = run(other, bbcluster + " --resume " + dir / "run");
  CHECK(resume.status == 2);
  CHECK_THAT(resume.err, Catch::Contains("is in use by another sweep (" + holder));

  auto rc = wait_exit(first, 300);
  INFO(bb::test::read_file(dir / "stderr"));
  REQUIRE(rc == 0);
  // Only the first sweep wrote the journal.
  CHECK(journal_lines(dir / "run/results.jsonl", "job_finished").size() == 9);
  // Its end frees the folder: the resume runs (nothing is left to run).
  auto after = run(other, bbcluster + " --resume " + dir / "run");
  INFO(after.err);
  CHECK(after.status == 0);
  CHECK_THAT(after.err, Catch::Contains("9 of 9 operators finished before"));
}

TEST_CASE("a coordinator killed mid-sweep takes its local nodes with it, and the folder resumes",
          "[integration]") {
  bb::test::temp_dir dir;
  // One host on two ports: two nodes, each with its own endpoint file and logs.
  bb::test::write_file(dir / "hosts.txt", "n1 slots=1\nn1:6000 slots=1\n");
  pid_t sweep = start(dir, slow_sweep(dir, {"--nodes", dir / "hosts.txt", "--launcher", "local"}));
  REQUIRE(journal_started(dir, 180));
  auto nodes = children_named(sweep, "bbnode");
  REQUIRE(nodes.size() == 2);
  auto endpoint_a = bb::test::read_file(dir / "run/nodes/n1-5555.endpoint");
  auto endpoint_b = bb::test::read_file(dir / "run/nodes/n1-6000.endpoint");
  CHECK_FALSE(endpoint_a.empty());
  CHECK_FALSE(endpoint_b.empty());
  CHECK(endpoint_a != endpoint_b);
  CHECK(std::filesystem::exists(dir / "run/nodes/n1-5555.pid"));
  CHECK(std::filesystem::exists(dir / "run/nodes/n1-6000.pid"));

  ::kill(sweep, SIGKILL);
  wait_exit(sweep, 10);
  for (auto pid : nodes)
    CHECK(gone_within(pid, 15));

  // The kernel freed the lock with the process: the folder resumes at once, and finishes.
  auto resumed = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  CHECK(resumed.status == 0);
  std::set<std::string> finished;
  for (auto& j : journal_lines(dir / "run/results.jsonl", "job_finished"))
    finished.insert(j["op_name"].get<std::string>());
  CHECK(finished.size() == 9);
  // Its nodes were stopped at its end, and their records removed with them.
  CHECK_FALSE(std::filesystem::exists(dir / "run/nodes/n1-5555.pid"));
  CHECK_FALSE(std::filesystem::exists(dir / "run/nodes/n1-6000.pid"));
}

TEST_CASE("a sweep on a folder ends the bbnodes a gone coordinator of it left running",
          "[integration]") {
  bb::test::temp_dir dir;
  auto first = run(dir, bbcluster + " --suite smoke --ops relu --log-dir " + dir / "run");
  INFO(first.err);
  REQUIRE(first.status == 0);
  // A coordinator (of a bbcluster from before nodes got a signal when theirs died) started a
  // node for the folder, recorded it, and was killed.
  auto nodes_dir = dir / "run/nodes";
  std::filesystem::create_directories(nodes_dir + "/old");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t coordinator = ::fork();
  if (coordinator == 0) {
    pid_t node = ::fork();
    if (node == 0) {
      std::freopen((nodes_dir + "/old/bbnode.log").c_str(), "w", stdout);
      std::freopen((nodes_dir + "/old/bbnode.log").c_str(), "a", stderr);
      ::execl(bbnode.c_str(), bbnode.c_str(), "--listen", "tcp://127.0.0.1:0", "--name", "old",
              "--endpoint-file", (nodes_dir + "/old.endpoint").c_str(), "--log-dir",
              (nodes_dir + "/old").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    bb::record_local_node(nodes_dir, "old", node);
    (void)!::write(fds[1], &node, sizeof(node));
    ::_exit(0);
  }
  pid_t node = 0;
  REQUIRE(::read(fds[0], &node, sizeof(node)) == sizeof(node));
  ::close(fds[0]);
  ::close(fds[1]);
  ::waitpid(coordinator, nullptr, 0);
  for (int i = 0; i < 400 && bb::test::read_file(nodes_dir + "/old.endpoint").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(alive(node));
  REQUIRE_FALSE(bb::test::read_file(nodes_dir + "/old.endpoint").empty());

  auto resumed = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.err, Catch::Contains("ended node old (pid " + std::to_string(node)
                                          + "), left running by the sweep of pid "
                                          + std::to_string(coordinator)));
  CHECK_FALSE(alive(node));
  CHECK_FALSE(std::filesystem::exists(nodes_dir + "/old.pid"));
  if (alive(node))
    ::kill(node, SIGKILL);
}

TEST_CASE("a resumed sweep records the command it was started with, which runs again",
          "[integration]") {
  bb::test::temp_dir dir;
  auto command = "bbcluster --suite torchbench --data " BB_TRACES_DIR
                 "/hf_train --ops relu.default,tanh.default,neg.default --topn 1 --config " BB_SOURCE_DIR
                 "/tests/fast.toml --log-dir run";
  auto in_dir = "cd " + dir.path + " && " BB_BIN_DIR "/";
  auto first = run(dir, in_dir + command);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto journal = dir / "run/results.jsonl";
  auto lines = journal_lines(journal, "job_finished");
  REQUIRE(lines.size() == 3);
  bb::test::write_file(journal, lines[0].dump() + "\n" + lines[1].dump() + "\n");

  auto resumed = run(dir, "cd / && " + bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  auto summary = bb::test::read_file(dir / "run/OVERALL_SUMMARY.md");
  CHECK_THAT(summary, Catch::Contains("## Command\n```bash\n" + std::string(command) + "\n```"));
  CHECK_THAT(summary, !Catch::Contains("--resume"));
  CHECK_THAT(bb::test::read_file(dir / "run/report.html"), !Catch::Contains("--resume " + dir / "run"));

  // Both run again: the recorded command (a fresh sweep into the folder), and --resume.
  auto again = run(dir, in_dir + command);
  INFO(again.err);
  CHECK(again.status == 0);
  auto resumed_again = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(resumed_again.err);
  CHECK(resumed_again.status == 0);
}

TEST_CASE("a hostfile naming one node twice is refused before any node starts", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "hosts.txt", "n1 slots=1\nn1:5555 slots=1\n");
  auto r = run(dir, bbcluster + " --suite smoke --ops relu --nodes " + dir / "hosts.txt"
                      + " --launcher local --log-dir " + dir / "run");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains(dir / "hosts.txt:2: n1:5555 is the same node as line 1 (n1, port 5555)"));
  CHECK_FALSE(std::filesystem::exists(dir / "run/nodes"));
}

TEST_CASE("keygen keeps existing keys unless told --force", "[integration]") {
  bb::test::temp_dir dir;
  auto keys = dir / "keys";
  REQUIRE(run(dir, bbcluster + " keygen " + keys).status == 0);
  auto before = bb::test::read_file(keys + "/coordinator.key");
  auto again = run(dir, bbcluster + " keygen " + keys);
  CHECK(again.status == 2);
  CHECK_THAT(again.err, Catch::Contains(keys + "/coordinator.key exists"));
  CHECK_THAT(again.err, Catch::Contains("--force"));
  CHECK(bb::test::read_file(keys + "/coordinator.key") == before);
  auto forced = run(dir, bbcluster + " keygen --force " + keys);
  CHECK(forced.status == 0);
  CHECK(bb::test::read_file(keys + "/coordinator.key") != before);
  CHECK(run(dir, bbcluster + " keygen").status == 2);
}

TEST_CASE("a journal cut mid-line, as a full disk leaves it, resumes: the torn line's operator runs again",
          "[integration]") {
  bb::test::temp_dir dir;
  auto command = bbcluster + " --suite torchbench --data " BB_TRACES_DIR
                 "/hf_train --ops relu.default,tanh.default,neg.default --topn 1 --config " BB_SOURCE_DIR
                 "/tests/fast.toml --log-dir " + dir / "run";
  auto first = run(dir, command);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto journal = dir / "run/results.jsonl";
  auto lines = journal_lines(journal, "job_finished");
  REQUIRE(lines.size() == 3);
  auto torn = lines[1].dump();
  bb::test::write_file(journal, lines[0].dump() + "\n" + torn.substr(0, torn.size() / 2));

  auto resumed = run(dir, bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  // The torn half-line stays where it was (bbcluster starts its next line after it); every
  // complete line is JSON.
  std::map<std::string, int> finished;
  size_t unreadable = 0;
  std::istringstream in(bb::test::read_file(journal));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++unreadable;
      continue;
    }
    if (j.value("event", "") == "job_finished")
      ++finished[j["op_name"].get<std::string>()];
  }
  CHECK(unreadable == 1);
  CHECK(finished.size() == 3);
  for (auto& [op, n] : finished) {
    INFO(op);
    CHECK(n == 1);
  }
  CHECK_THAT(bb::test::read_file(dir / "run/OVERALL_SUMMARY.md"), !Catch::Contains("Running"));
}
