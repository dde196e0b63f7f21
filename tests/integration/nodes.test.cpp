#include <catch2/catch.hpp>

#include "skip.hpp"

#include <chrono>
#include <csignal>
#include <map>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "messages/wire.hpp"
#include "programs.hpp"
#include "transport/zmq_wake.hpp"

using nlohmann::json;
using bb::test::children_named;
using bb::test::journal_lines;
using bb::test::wait_exit;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string bbnode = BB_BIN_DIR "/bbnode";

// A bbnode listening on a free loopback port, its output in dir/node.log, with `extra` flags:
// its pid and the endpoint it says it listens on ("" when it said nothing within 20 s).
std::pair<pid_t, std::string> start_node(const bb::test::temp_dir& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"bbnode", "--listen", "tcp://127.0.0.1:0", "--endpoint-file", dir / "endpoint"};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_t node = ::fork();
  if (node == 0) {
    std::freopen((dir / "node.log").c_str(), "w", stdout);
    std::freopen((dir / "node.log").c_str(), "a", stderr);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bbnode.c_str(), argv.data());
    ::_exit(127);
  }
  std::string endpoint;
  for (int i = 0; i < 400 && endpoint.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    endpoint = bb::test::read_file(dir / "endpoint");
  }
  if (!endpoint.empty() && endpoint.back() == '\n')
    endpoint.pop_back();
  return {node, endpoint};
}

using bb::test::nine_ops;

const char* settings =
  "[nodes]\nheartbeat_s = 0.3\nsilence_s = 2.0\n"
  "[timing]\ncpu_warmup = 2\ncpu_runs = 100\ncpu_max_seconds = 0.5\n";


// bbcluster over three local nodes, in the background.
pid_t start_sweep(const bb::test::temp_dir& dir) {
  bb::test::write_file(dir / "ops.txt", nine_ops);
  bb::test::write_file(dir / "settings.toml", settings);
  bb::test::write_file(dir / "hosts.txt", "node-a slots=1\nnode-b slots=1\nnode-c slots=1\n");
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen((dir / "stdout").c_str(), "w", stdout);
    std::freopen((dir / "stderr").c_str(), "w", stderr);
    ::execl(bbcluster.c_str(), "bbcluster", "--suite", "torchbench", "--data", (dir / "ops.txt").c_str(),
            "--nodes", (dir / "hosts.txt").c_str(), "--launcher", "local", "--config",
            (dir / "settings.toml").c_str(), "--log-dir", (dir / "run").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}


// Waits for the first finished job, then returns the three bbnode pids.
std::vector<pid_t> nodes_once_busy(pid_t sweep, const bb::test::temp_dir& dir) {
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!journal_lines(dir / "run/results.jsonl").empty())
      break;
  }
  return children_named(sweep, "bbnode");
}


void check_all_finished_ok(const std::vector<json>& lines) {
  std::map<std::string, std::string> finished;
  for (auto& j : lines)
    if (j["event"] == "job_finished") {
      CHECK(finished.count(j["op_name"]) == 0);
      finished[j["op_name"]] = j["outcome"];
    }
  CHECK(finished.size() == 9);
  for (auto& [op, outcome] : finished) {
    INFO(op);
    CHECK(outcome == "ok");
  }
}

} // namespace

TEST_CASE("three local nodes: a node killed mid-sweep, its job requeued and finished elsewhere",
          "[integration]") {
  bb::test::temp_dir dir;
  auto sweep = start_sweep(dir);
  auto nodes = nodes_once_busy(sweep, dir);
  REQUIRE(nodes.size() == 3);
  ::kill(nodes[1], SIGKILL);
  auto rc = wait_exit(sweep, 120);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err.substr(err.size() > 5000 ? err.size() - 5000 : 0));
  CHECK(rc == 0);
  CHECK(bb::test::read_file(dir / "stdout").find("correctness score (mean pass rate over all operators): 1.00")
        == 0);
  auto lines = journal_lines(dir / "run/results.jsonl");
  check_all_finished_ok(lines);
  size_t requeued = 0;
  for (auto& j : lines)
    if (j["event"] == "job_requeued") {
      ++requeued;
      CHECK(j["outcome"] == "infra_error");
      CHECK(j["detail"].get<std::string>().find("lost") != std::string::npos);
    }
  CHECK(requeued >= 1);
  CHECK(err.find("lost (silent for") != std::string::npos);
}

TEST_CASE("three local nodes: a stopped node is lost, the sweep finishes, and it rejoins when continued",
          "[integration]") {
  bb::test::temp_dir dir;
  auto sweep = start_sweep(dir);
  auto nodes = nodes_once_busy(sweep, dir);
  REQUIRE(nodes.size() == 3);
  ::kill(nodes[2], SIGSTOP); // a stand-in for a network cut
  // Continue it once it was declared lost: it answers again and rejoins.
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (bb::test::read_file(dir / "stderr").find("lost (silent for") != std::string::npos)
      break;
  }
  ::kill(nodes[2], SIGCONT);
  auto rc = wait_exit(sweep, 120);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err.substr(err.size() > 5000 ? err.size() - 5000 : 0));
  CHECK(rc == 0);
  check_all_finished_ok(journal_lines(dir / "run/results.jsonl"));
  CHECK(err.find("lost (silent for") != std::string::npos);
  // It rejoined unless every job was done before it answered again.
  bool rejoined = err.find("back; rejoining") != std::string::npos;
  bool done_first = bb::test::read_file(dir / "stdout").find("correctness score") == 0;
  CHECK((rejoined || done_first));
}

TEST_CASE("bbnode refuses a peer of another protocol version, and non-loopback without keys",
          "[integration]") {
  bb::test::temp_dir dir;
  auto refused = std::system((bbnode + " --listen tcp://0.0.0.0:5999 >" + dir / "out" + " 2>&1").c_str());
  CHECK(WEXITSTATUS(refused) == 2);
  CHECK(bb::test::read_file(dir / "out").find("refusing to listen on tcp://0.0.0.0:5999 without CURVE keys")
        != std::string::npos);

  auto launched = start_node(dir, {});
  pid_t node = launched.first;
  std::string endpoint = launched.second;
  REQUIRE_FALSE(endpoint.empty());
  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(endpoint);
  bb::wire_message hello;
  hello.kind = bb::node_message::hello;
  hello.protocol = bb::protocol_version + 41;
  auto bytes = bb::pack(hello);
  peer.send(zmq::buffer(bytes));
  zmq::message_t answer;
  REQUIRE(peer.recv(answer));
  auto reply = bb::unpack<bb::wire_message>(answer.to_string());
  CHECK(reply.kind == bb::node_message::refuse);
  CHECK(reply.text.find("protocol") != std::string::npos);
  // The same peer with the right version is welcomed, with the node's description.
  hello.protocol = bb::protocol_version;
  bytes = bb::pack(hello);
  peer.send(zmq::buffer(bytes));
  REQUIRE(peer.recv(answer));
  reply = bb::unpack<bb::wire_message>(answer.to_string());
  CHECK(reply.kind == bb::node_message::welcome);
  CHECK(reply.node.slots == 1);
  ::kill(node, SIGTERM);
  CHECK(wait_exit(node, 20) == 0);
}

TEST_CASE("a stray hello mid-sweep is refused as busy and the sweep finishes on its node",
          "[integration]") {
  bb::test::temp_dir dir;
  auto launched = start_node(dir, {});
  pid_t node = launched.first;
  std::string endpoint = launched.second;
  REQUIRE_FALSE(endpoint.empty());
  auto port = endpoint.substr(endpoint.rfind(':') + 1);
  bb::test::write_file(dir / "hosts.txt", "127.0.0.1:" + port + " slots=1\n");
  // The first four of the nine operators: long enough for a stranger to come mid-sweep.
  std::string four(nine_ops);
  size_t cut = 0;
  for (int i = 0; i < 4; ++i)
    cut = four.find("cnt:", cut) + 1;
  four = four.substr(0, four.find('\n', cut) + 1);
  bb::test::write_file(dir / "ops.txt", four);
  bb::test::write_file(dir / "settings.toml", settings);
  pid_t sweep = ::fork();
  if (sweep == 0) {
    std::freopen((dir / "sweep.out").c_str(), "w", stdout);
    std::freopen((dir / "sweep.out").c_str(), "a", stderr);
    auto line = "exec " + bbcluster + " --suite torchbench --data " + dir / "ops.txt" + " --nodes "
                + dir / "hosts.txt" + " --config " + dir / "settings.toml" + " --log-dir " + dir / "run";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 600 && bb::test::journal_lines(dir / "run/results.jsonl").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A stranger, well formed and of the right protocol, greets the node mid-sweep.
  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(endpoint);
  bb::wire_message hello;
  hello.kind = bb::node_message::hello;
  hello.session = "a-stranger";
  peer.send(zmq::buffer(bb::pack(hello)));
  zmq::message_t answer;
  REQUIRE(peer.recv(answer));
  auto reply = bb::unpack<bb::wire_message>(answer.to_string());
  CHECK(reply.kind == bb::node_message::refuse);
  CHECK(reply.text.rfind(bb::busy_refusal, 0) == 0);
  // It keeps at it, and sends a ping as if it were the coordinator.
  for (int i = 0; i < 5; ++i) {
    peer.send(zmq::buffer(bb::pack(hello)));
    auto ping = hello;
    ping.kind = bb::node_message::ping;
    peer.send(zmq::buffer(bb::pack(ping)));
  }
  // A frame announcing more than the node takes is dropped before it is read.
  zmq::socket_t big(ctx, zmq::socket_type::dealer);
  big.set(zmq::sockopt::linger, 0);
  zmq::socket_t big_monitor(ctx, zmq::socket_type::pair);
  REQUIRE(bb::start_monitor(big, big_monitor, &big, ZMQ_EVENT_DISCONNECTED));
  big.connect(endpoint);
  std::string huge(size_t{65} << 20, 'x');
  big.send(zmq::buffer(huge));
  // The node ends that connection unread, and its log says a connection ended.
  bool dropped = false;
  for (int i = 0; i < 100 && !dropped; ++i) {
    if (auto e = bb::next_monitor_event(big_monitor))
      dropped = e->event == ZMQ_EVENT_DISCONNECTED;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(dropped);
  bool logged = false;
  for (int i = 0; i < 50 && !logged; ++i) {
    logged = bb::test::read_file(dir / "node.log").find("a connection ended (a peer leaving, a failed "
                                                        "handshake, or a frame over 64 MiB") != std::string::npos;
    if (!logged)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(logged);
  CHECK(bb::test::journal_lines(dir / "run/results.jsonl", "job_finished").size() < 4);
  // The sweep's own coordinator keeps the node and finishes every operator there.
  auto rc = wait_exit(sweep, 180);
  INFO(bb::test::read_file(dir / "sweep.out"));
  CHECK(rc == 0);
  CHECK(bb::test::journal_lines(dir / "run/results.jsonl", "job_finished").size() == 4);
  auto log = bb::test::read_file(dir / "node.log");
  INFO(log);
  // Refusals are logged, once per peer and reason a minute, not once per frame.
  size_t busy = 0;
  for (size_t at = 0; (at = log.find("refused peer", at)) != std::string::npos; ++at)
    ++busy;
  CHECK(busy >= 1);
  CHECK(busy <= 3);
  ::kill(node, SIGTERM);
  CHECK(wait_exit(node, 20) == 0);
}

TEST_CASE("a directory sweep over three local nodes gives the verdicts of one node", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "trace.txt",
                       "Operator: aten.relu.default\ncnt: 1, ((T([64, 32], f32),), {})\n"
                       "Operator: aten.add.Tensor\ncnt: 1, ((T([8, 8], f32), T([8], f32)), {})\n"
                       "Operator: aten.sub.Tensor\ncnt: 1, ((T([8], f32), T([8], f32)), {})\n"
                       "Operator: aten.neg.default\ncnt: 1, ((T([8], f32),), {})\n"
                       "Operator: aten.sin.default\ncnt: 1, ((T([32], f32),), {})\n"
                       "Operator: aten.mul.Tensor\ncnt: 1, ((T([8], f32), T([8], f32)), {})\n");
  bb::test::write_file(dir / "settings.toml", "[timing]\ncpu_warmup = 1\ncpu_runs = 3\n[compile]\ncache_dir = \"" BB_TEST_CACHE "\"\n");
  bb::test::write_file(dir / "hosts.txt", "node-a slots=1\nnode-b slots=1\nnode-c slots=1\n");
  auto base = bbcluster + " --suite torchbench --data " + dir / "trace.txt"
              + " --backend directory --ops-directory " BB_SOURCE_DIR "/examples/kernels --config "
              + dir / "settings.toml";
  auto one = std::system((base + " --log-dir " + dir / "one >" + dir / "one.out 2>&1").c_str());
  auto three = std::system((base + " --nodes " + dir / "hosts.txt" + " --launcher local --log-dir "
                            + dir / "three >" + dir / "three.out 2>&1")
                             .c_str());
  INFO(bb::test::read_file(dir / "three.out"));
  REQUIRE(WEXITSTATUS(one) == 0);
  REQUIRE(WEXITSTATUS(three) == 0);
  auto verdicts = [&](const std::string& run) {
    std::map<std::string, std::string> out;
    for (auto& row : json::parse(bb::test::read_file(run + "/full_results.json")))
      if (row["test_type"] == "correctness")
        out[row["op_name"].get<std::string>() + row["args"].get<std::string>()] =
          row["is_correct"].dump() + " " + row["error_type"].get<std::string>();
    return out;
  };
  auto a = verdicts(dir / "one");
  auto b = verdicts(dir / "three");
  CHECK(a.size() == 6);
  CHECK(a == b);
  CHECK(a["sub.Tensor((T([8], f32), T([8], f32),), {})"] == "false incorrect");
  CHECK(bb::test::read_file(dir / "three.out").find("node node-c at tcp://127.0.0.1:") != std::string::npos);
}

TEST_CASE("CURVE: a node with keys serves the coordinator's key and nobody else's", "[integration]") {
  bb::test::temp_dir dir;
  REQUIRE(std::system((bbcluster + " keygen " + dir / "keys >" + dir / "keygen.out").c_str()) == 0);
  REQUIRE(std::system((bbcluster + " keygen " + dir / "other >>" + dir / "keygen.out").c_str()) == 0);
  for (std::string f : {"coordinator.key", "coordinator.pub", "node.key", "node.pub"})
    CHECK(std::filesystem::exists(dir / "keys/" + f));
  CHECK((std::filesystem::status(dir / "keys/node.key").permissions() & std::filesystem::perms::others_read)
        == std::filesystem::perms::none);
  auto launched = start_node(dir, {"--keys", dir / "keys"});
  pid_t node = launched.first;
  std::string endpoint = launched.second;
  REQUIRE_FALSE(endpoint.empty());
  auto port = endpoint.substr(endpoint.rfind(':') + 1);
  bb::test::write_file(dir / "hosts.txt", "127.0.0.1:" + port + " slots=1\n");
  auto sweep = [&](const std::string& keys, const std::string& name) {
    bb::test::write_file(dir / (name + ".toml"), "[evaluator]\nstart_timeout_s = 5.0\n[nodes]\nkeys = \"" + keys + "\"\n");
    auto line = bbcluster + " --nodes " + dir / "hosts.txt" + " --config " + dir / (name + ".toml")
                + " --disable-output-logs >" + dir / (name + ".out") + " 2>&1";
    int raw = std::system(line.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  };
  // The coordinator's own key: served.
  CHECK(sweep(dir / "keys", "right") == 0);
  CHECK(bb::test::read_file(dir / "right.out").find("correctness score (mean pass rate over all operators): 1.00")
        != std::string::npos);
  // Another coordinator's keys: the handshake fails, and the coordinator says so by name
  // within a few seconds (its connect timeout here is 5 s; 60 s by default).
  auto started = std::chrono::steady_clock::now();
  CHECK(sweep(dir / "other", "wrong") == 2);
  auto wrong = bb::test::read_file(dir / "wrong.out");
  INFO(wrong);
  CHECK(wrong.find("the node's key in nodes.keys is not this node's") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  // The node says so too, from its router's monitor.
  CHECK(bb::test::read_file(dir / "node.log").find("a peer failed the CURVE handshake: it does not hold "
                                                    "this node's public key") != std::string::npos);
  // A client that knows the node's key but is not the coordinator: refused by the node, which
  // logs it, and the coordinator says that its key is not accepted.
  std::filesystem::create_directories(dir / "mixed");
  std::filesystem::copy_file(dir / "keys/node.pub", dir / "mixed/node.pub");
  std::filesystem::copy_file(dir / "other/coordinator.key", dir / "mixed/coordinator.key");
  CHECK(sweep(dir / "mixed", "mixed") == 2);
  auto mixed = bb::test::read_file(dir / "mixed.out");
  INFO(mixed);
  CHECK(mixed.find("the node does not accept this coordinator's key") != std::string::npos);
  // The node names the key it refused.
  auto other_pub = bb::test::read_file(dir / "other/coordinator.pub");
  auto key_at = other_pub.find("public-key: ");
  REQUIRE(key_at != std::string::npos);
  auto other_key = other_pub.substr(key_at + 12, 40);
  auto refused_at = bb::test::read_file(dir / "node.log").find("refused a peer whose key is not the coordinator's: "
                                                               "public key " + other_key);
  CHECK(refused_at != std::string::npos);
  // No keys at all: nothing either.
  CHECK(sweep("", "none") == 2);
  ::kill(node, SIGTERM);
  CHECK(wait_exit(node, 20) == 0);
}

TEST_CASE("the slurm launcher inside a real allocation: one bbnode per node through srun",
          "[integration][slurm]") {
  if (std::system("sinfo -h >/dev/null 2>&1") != 0) {
    BB_SKIP("no Slurm here: start one with tests/slurm/start.sh (scripts/test.sh does as root)");
  }
  bb::test::temp_dir dir;
  REQUIRE(std::system((bbcluster + " keygen " + dir / "keys >/dev/null").c_str()) == 0);
  bb::test::write_file(dir / "slurm.toml", "[nodes]\nkeys = \"" + dir / "keys" + "\"\nport = 5611\n"
                                           "[timing]\ncpu_warmup = 1\ncpu_runs = 3\n");
  // Outside an allocation the launcher says how to get one.
  auto outside = std::system(("env -u SLURM_JOB_ID " + bbcluster + " --launcher slurm --config " +
                              dir / "slurm.toml" + " >" + dir / "outside.out 2>&1").c_str());
  CHECK(WEXITSTATUS(outside) == 2);
  CHECK(bb::test::read_file(dir / "outside.out").find("salloc or sbatch") != std::string::npos);
  auto line = "timeout 120 salloc -N1 " + bbcluster + " --launcher slurm --config " + dir / "slurm.toml"
              + " --log-dir " + dir / "run >" + dir / "out 2>&1";
  int raw = std::system(line.c_str());
  auto out = bb::test::read_file(dir / "out");
  INFO(out);
  CHECK(WEXITSTATUS(raw) == 0);
  CHECK(out.find("correctness score (mean pass rate over all operators): 1.00") != std::string::npos);
  CHECK(out.find("bbnode on 1 nodes through srun") != std::string::npos);
  CHECK(out.find(":5611: 1 cpu slots") != std::string::npos);
}

TEST_CASE("the ssh launcher starts bbnode through ssh and stops it after the sweep",
          "[integration][ssh]") {
  auto ssh = bb::test::read_file("/tmp/bbcluster-ssh/command");
  if (ssh.empty() || std::system("kill -0 $(cat /tmp/bbcluster-ssh/sshd.pid 2>/dev/null) 2>/dev/null") != 0) {
    BB_SKIP("no test sshd here: start one with tests/ssh/start.sh (scripts/test.sh does as root)");
  }
  ssh.erase(ssh.find_last_not_of("\n") + 1);
  bb::test::temp_dir dir;
  REQUIRE(std::system((bbcluster + " keygen " + dir / "keys >/dev/null").c_str()) == 0);
  bb::test::write_file(dir / "ssh.toml", "[nodes]\nkeys = \"" + dir / "keys" + "\"\nport = 5613\nssh = \"" + ssh
                                           + "\"\n[timing]\ncpu_warmup = 1\ncpu_runs = 3\n");
  bb::test::write_file(dir / "hosts.txt", "127.0.0.1 slots=2\n");
  auto line = bbcluster + " --nodes " + dir / "hosts.txt" + " --launcher ssh --config " + dir / "ssh.toml"
              + " --log-dir " + dir / "run >" + dir / "out 2>&1";
  int raw = std::system(line.c_str());
  auto out = bb::test::read_file(dir / "out");
  INFO(out);
  CHECK(WEXITSTATUS(raw) == 0);
  CHECK(out.find("correctness score (mean pass rate over all operators): 1.00") != std::string::npos);
  CHECK(out.find("node 127.0.0.1 at tcp://127.0.0.1:5613: 2 cpu slots") != std::string::npos);
  // The remote bbnode ended with its ssh session.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(std::system("pgrep -f 'bbnode --listen tcp://0.0.0.[0]:5613' >/dev/null") != 0);
  // Without keys the launcher refuses: its nodes listen beyond loopback.
  bb::test::write_file(dir / "nokeys.toml", "[nodes]\nssh = \"" + ssh + "\"\n");
  auto refused = std::system((bbcluster + " --nodes " + dir / "hosts.txt" + " --launcher ssh --config "
                              + dir / "nokeys.toml" + " >" + dir / "nokeys.out 2>&1").c_str());
  CHECK(WEXITSTATUS(refused) == 2);
  CHECK(bb::test::read_file(dir / "nokeys.out").find("need CURVE keys") != std::string::npos);
}

TEST_CASE("a coordinator killed mid-sweep leaves its node ready for the next coordinator",
          "[integration]") {
  bb::test::temp_dir dir;
  auto launched = start_node(dir, {"--coordinator-silence", "2"});
  pid_t node = launched.first;
  std::string endpoint = launched.second;
  REQUIRE_FALSE(endpoint.empty());
  auto port = endpoint.substr(endpoint.rfind(':') + 1);
  bb::test::write_file(dir / "hosts.txt", "127.0.0.1:" + port + " slots=1\n");
  bb::test::write_file(dir / "ops.txt", nine_ops);
  bb::test::write_file(dir / "settings.toml", settings);
  auto sweep = [&](const std::string& name) {
    return bbcluster + " --suite torchbench --data " + dir / "ops.txt" + " --nodes " + dir / "hosts.txt"
           + " --config " + dir / "settings.toml" + " --log-dir " + dir / name;
  };
  pid_t first = ::fork();
  if (first == 0) {
    std::freopen((dir / "first.out").c_str(), "w", stdout);
    std::freopen((dir / "first.out").c_str(), "a", stderr);
    ::execl("/bin/sh", "sh", "-c", ("exec " + sweep("first")).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 600 && journal_lines(dir / "first/results.jsonl").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(first, SIGKILL);
  wait_exit(first, 10);
  // The next coordinator gets the node and runs its whole sweep there.
  int raw = std::system((sweep("second") + " >" + dir / "second.out 2>&1").c_str());
  INFO(bb::test::read_file(dir / "second.out"));
  CHECK(WEXITSTATUS(raw) == 0);
  check_all_finished_ok(journal_lines(dir / "second/results.jsonl"));
  ::kill(node, SIGTERM);
  CHECK(wait_exit(node, 20) == 0);
}

TEST_CASE("every node lost: the sweep stops with partial reports and says so", "[integration]") {
  bb::test::temp_dir dir;
  auto sweep = start_sweep(dir);
  auto nodes = nodes_once_busy(sweep, dir);
  REQUIRE(nodes.size() == 3);
  for (auto pid : nodes)
    ::kill(pid, SIGKILL);
  auto rc = wait_exit(sweep, 120);
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err.substr(err.size() > 4000 ? err.size() - 4000 : 0));
  CHECK(rc == 0);
  CHECK(err.find("no evaluator left") != std::string::npos);
  auto lines = journal_lines(dir / "run/results.jsonl");
  size_t ok = 0, lost = 0;
  for (auto& j : lines)
    if (j["event"] == "job_finished")
      (j["outcome"] == "ok" ? ok : lost) += 1;
  CHECK(ok >= 1);
  CHECK(lost >= 1);
  CHECK(ok + lost == 9);
  CHECK(std::filesystem::exists(dir / "run/OVERALL_SUMMARY.md"));
}

TEST_CASE("a node started by hand times and checks as the coordinator's settings say",
          "[integration]") {
  // The node runs with its own defaults (5 rounds, the exploit checks on); the sweep's file
  // says 3 rounds and its command line turns the checks off, then on again.
  bb::test::temp_dir dir;
  auto [node, endpoint] = start_node(dir, {});
  REQUIRE_FALSE(endpoint.empty());
  auto port = endpoint.substr(endpoint.rfind(':') + 1);
  bb::test::write_file(dir / "hosts.txt", "127.0.0.1:" + port + " slots=1\n");
  bb::test::write_file(dir / "ops.txt", "Operator: aten.relu.default\ncnt: 1, ((T([64, 64], f32),), {})\n"
                                        "Operator: aten.add.Tensor\ncnt: 1, ((T([32, 32], f32), T([32, 32], f32)), {})\n");
  bb::test::write_file(dir / "settings.toml", std::string(settings) + "rounds = 3\n");
  auto sweep = [&](const std::string& name, const std::string& flags) {
    auto rc = std::system((bbcluster + " --suite torchbench --data " + dir / "ops.txt" + " --nodes "
                           + dir / "hosts.txt" + " --config " + dir / "settings.toml" + " " + flags
                           + " --log-dir " + dir / name + " >" + dir / (name + ".out") + " 2>&1")
                            .c_str());
    INFO(bb::test::read_file(dir / (name + ".out")));
    REQUIRE(WEXITSTATUS(rc) == 0);
    auto jobs = journal_lines(dir / (name + "/results.jsonl"), "job_finished");
    REQUIRE(jobs.size() == 2);
    return jobs;
  };
  for (auto& j : sweep("off", "--no-exploit-checks")) {
    INFO(j.dump().substr(0, 2000));
    CHECK(j["outcome"] == "ok");
    CHECK(j["performance"][0]["timing_rounds"] == 3);
    // The checks' own phase is missing: the node did not run them.
    CHECK_FALSE(j["phases"].contains("check_timed"));
  }
  for (auto& j : sweep("on", "")) {
    INFO(j.dump().substr(0, 2000));
    CHECK(j["outcome"] == "ok");
    CHECK(j["performance"][0]["timing_rounds"] == 3);
    CHECK(j["phases"].contains("check_timed"));
    CHECK(j["provenance"]["sandbox"] != "off");
  }
  // The sandbox and the timeouts travel too: the node's slots start again without a sandbox,
  // and the next sweep's settings (its own defaults) bring it back.
  for (auto& j : sweep("bare", "--set evaluator.sandbox=off --set evaluator.call_timeout_s=30")) {
    INFO(j.dump().substr(0, 2000));
    CHECK(j["outcome"] == "ok");
    CHECK(j["provenance"]["sandbox"] == "off");
  }
  for (auto& j : sweep("again", ""))
    CHECK(j["provenance"]["sandbox"] != "off");
  CHECK(bb::test::read_file(dir / "node.log").find("its slots start again with them") != std::string::npos);
  ::kill(node, SIGTERM);
  CHECK(wait_exit(node, 20) == 0);
}

TEST_CASE("two local nodes given non-default timing, cache and sandbox settings record as one",
          "[integration]") {
  // The nodes get the sweep's file; what the command line adds reaches them only in the
  // session's hello.
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "ops.txt", "Operator: aten.relu.default\ncnt: 1, ((T([64, 64], f32),), {})\n"
                                        "Operator: aten.add.Tensor\ncnt: 1, ((T([32, 32], f32), T([32, 32], f32)), {})\n"
                                        "Operator: aten.neg.default\ncnt: 1, ((T([16], f32),), {})\n");
  bb::test::write_file(dir / "settings.toml", std::string(settings));
  bb::test::write_file(dir / "hosts.txt", "node-a slots=1\nnode-b slots=1\n");
  const std::string changed = " --no-reference-cache --no-exploit-checks --timer adaptive"
                              " --set timing.rounds=3 --set timing.cpu_runs=4"
                              " --set evaluator.sandbox=off --set evaluator.call_timeout_s=45";
  auto base = bbcluster + " --suite torchbench --data " + dir / "ops.txt" + " --config "
              + dir / "settings.toml" + changed;
  auto local = std::system((base + " --log-dir " + dir / "local >" + dir / "local.out 2>&1").c_str());
  auto nodes = std::system((base + " --nodes " + dir / "hosts.txt" + " --launcher local --log-dir "
                            + dir / "nodes >" + dir / "nodes.out 2>&1")
                             .c_str());
  INFO(bb::test::read_file(dir / "nodes.out"));
  REQUIRE(WEXITSTATUS(local) == 0);
  REQUIRE(WEXITSTATUS(nodes) == 0);
  // What each operator was evaluated with, from its journal line.
  auto records = [&](const std::string& run) {
    std::map<std::string, std::string> out;
    for (auto& j : journal_lines(dir / (run + "/results.jsonl"), "job_finished")) {
      auto& p = j["performance"][0];
      out[j["op_name"].get<std::string>()] =
        j["outcome"].get<std::string>() + " correct " + j["correctness"][0]["is_correct"].dump()
        + " rounds " + p["timing_rounds"].dump() + " timer " + p["timer"].get<std::string>()
        + " cached " + p["reference_cached"].dump() + " sandbox "
        + j["provenance"]["sandbox"].get<std::string>() + " checks "
        + (j["phases"].contains("check_timed") ? "on" : "off");
      // What the slot says it measured with, key by key.
      for (auto& [key, value] : j["provenance"]["settings"].items())
        out[j["op_name"].get<std::string>() + " " + key] = value.get<std::string>();
    }
    return out;
  };
  auto a = records("local");
  auto b = records("nodes");
  REQUIRE(a.size() > 3 * 10);
  CHECK(a == b);
  CHECK(a["aten.relu.default timing.timer"] == "adaptive");
  CHECK(a["aten.relu.default timing.rounds"] == "3");
  CHECK(a["aten.relu.default timing.cpu_runs"] == "4");
  CHECK(a["aten.relu.default timing.reference_cache"] == "false");
  CHECK(a["aten.relu.default checks.exploits"] == "false");
  CHECK(a["aten.relu.default evaluator.call_timeout_s"] == "45.0");
  CHECK(a["aten.relu.default"] == "ok correct true rounds 3 timer cpu_bench cached false sandbox off checks off");
  // Evaluated on the nodes, not here.
  auto remote = journal_lines(dir / "nodes/results.jsonl", "job_finished");
  REQUIRE(remote.size() == 3);
  for (auto& j : remote)
    CHECK(j["provenance"]["node"].get<std::string>().rfind("node-", 0) == 0);
  // A CPU times with cpu_bench whatever the timer: that the nodes took the sweep's timer is
  // in their logs, with every other key the hello changed.
  for (auto name : {"node-a", "node-b"}) {
    auto log = bb::test::read_file(dir / (std::string("nodes/nodes/") + name + "/bbnode.log"));
    INFO(name << ": " << log);
    auto at = log.find("the coordinator's settings differ");
    REQUIRE(at != std::string::npos);
    auto line = log.substr(at);
    line = line.substr(0, line.find('\n'));
    for (auto key : {"timing.timer", "timing.rounds", "timing.cpu_runs", "timing.reference_cache",
                     "checks.exploits", "evaluator.sandbox", "evaluator.call_timeout_s"})
      CHECK_THAT(line, Catch::Contains(key));
  }
}
