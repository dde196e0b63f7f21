// The escape corpus (tests/kernels/escape): kernels that try to end the sweep, reach the
// network, read the home and the CURVE keys, write outside their scratch folder, fork without
// end and fill the disk. Swept with the sandbox on, each ends as its own job's outcome; swept
// with it off, the escapes it stops succeed.
//
// Every sweep runs inside a PID namespace of its own (bwrap --unshare-pid): a kernel that
// signals every process it can see must not reach the test, its shell or anything else, even
// with the sandbox off. The kernels that need limits to end (the fork bomb, the disk filler)
// run only with the sandbox on. Network attempts go to 127.0.0.1 and to this machine's own
// address, where the test listens.

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "integration/programs.hpp"
#include "process/sandbox.hpp"
#include "support.hpp"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string home_secret = "home-secret-7f3a9c";

// This machine's first IPv4 address that is not loopback, or "".
std::string own_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return "";
  std::string out;
  for (auto* a = list; a && out.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET)
      continue;
    char text[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) && std::string(text).rfind("127.", 0) != 0)
      out = text;
  }
  ::freeifaddrs(list);
  return out;
}

// A listening TCP socket on every address of the machine: what a kernel could reach.
struct listener {
  int fd = -1;
  int port = 0;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd, 64) == 0
        && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
  }
  ~listener() {
    ::close(fd);
  }
  // Connections made since the last call.
  int accepted() {
    int n = 0;
    for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0; ++n)
      ::close(c);
    return n;
  }
};

// Folders of one test, outside /tmp and the homes (a sandbox's /tmp is its own and the homes
// are hidden, which would hide them whatever the sandbox does about the home, the keys and the
// run folder): a checkout under /tmp or a home runs this test as one elsewhere does.
struct escape_world {
  std::string root;
  listener net;
  std::string host = own_address();

  escape_world() {
    root = bb::test::unhidden_temp_dir("escape");
    // Readable by the unprivileged user a sandboxed runner started by root runs as.
    fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec
                              | fs::perms::others_read | fs::perms::others_exec);
    fs::create_directories(root + "/home");
    bb::test::write_file(root + "/home/secret.txt", home_secret + "\n");
    // The corpus is copied: a kernel that escapes writes beside its source.
    fs::copy(BB_SOURCE_DIR "/tests/kernels/escape", root + "/corpus", fs::copy_options::recursive);
  }
  ~escape_world() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  std::string keys() const {
    return root + "/keys";
  }

  // One sweep of `ops` with evaluator.sandbox = `mode`, in its own PID namespace. Returns the
  // exit status of bbcluster (128 + N when a signal ended it), and the run folder.
  int sweep(const std::string& name, const std::vector<std::string>& ops, const std::string& mode,
            std::string& run) {
    run = root + "/" + name;
    std::string trace;
    for (auto& op : ops)
      trace += "Operator: aten." + op + "\ncnt: 1, ((T([4, 8], f32),), {})\n";
    bb::test::write_file(root + "/" + name + ".txt", trace);
    bb::test::write_file(root + "/" + name + ".toml",
                         "[evaluator]\ncall_timeout_s = 3.0\njob_timeout_s = 60.0\nmax_attempts = 2\n"
                         "sandbox = \"" + mode + "\"\nsandbox_tmp_mb = 64\nsandbox_max_processes = 128\n"
                         "sandbox_max_file_mb = 16\n[timing]\ncpu_warmup = 1\ncpu_runs = 3\n"
                         "[compile]\ncache_dir = \"" BB_TEST_CACHE "\"\n[nodes]\nkeys = \"" + keys() + "\"\n");
    auto line = "env HOME=" + root + "/home BBCLUSTER_ESCAPE_PORT=" + std::to_string(net.port)
                + " BBCLUSTER_ESCAPE_HOST=" + host + " BBCLUSTER_ESCAPE_HOME_FILE=" + root
                + "/home/secret.txt BBCLUSTER_ESCAPE_CURVE_FILE=" + keys() + "/node.key"
                + " bwrap --unshare-pid --die-with-parent --dev-bind / / --proc /proc -- "
                + bbcluster + " --suite torchbench --data " + root + "/" + name + ".txt"
                + " --backend directory --ops-directory " + root + "/corpus --devices 1 --config "
                + root + "/" + name + ".toml --log-dir " + run + " >" + run + ".out 2>" + run
                + ".err </dev/null";
    int raw = std::system(line.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  }

  // The markers the writing kernel leaves where it escaped.
  std::vector<std::string> markers(const std::string& run) const {
    std::vector<std::string> out;
    for (auto p : {root + "/home/escape-marker", run + "/escape-marker",
                   root + "/corpus/sigmoid__default/escape-marker"})
      if (fs::exists(p))
        out.push_back(p);
    return out;
  }
};

std::map<std::string, json> finished_jobs(const std::string& run) {
  std::map<std::string, json> out;
  for (auto& j : bb::test::journal_lines(run + "/results.jsonl", "job_finished"))
    out[j["op_name"].get<std::string>().substr(5)] = j;
  return out;
}

bool escaped(const json& job) {
  return job["outcome"] == "ok" && job["correctness"][0]["is_correct"] == false
         && job["correctness"][0]["error_msg"].get<std::string>().find("ESCAPED") != std::string::npos;
}

bool correct(const json& job) {
  return job["outcome"] == "ok" && job["correctness"][0]["is_correct"] == true;
}

std::string text_of(const std::string& folder) {
  std::string all;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(folder, ec))
    if (e.is_regular_file(ec))
      all += bb::test::read_file(e.path().string());
  return all;
}

const std::vector<std::string> corpus = {"relu.default", "abs.default", "neg.default",
                                         "exp.default", "sin.default", "cos.default",
                                         "tanh.default", "sigmoid.default", "ceil.default",
                                         "floor.default", "trunc.default", "clone.default"};

} // namespace

TEST_CASE("the escape corpus swept with the sandbox on: every kernel ends as its own job",
          "[integration]") {
  auto why = bb::sandbox_unavailable();
  INFO(why);
  REQUIRE(why.empty()); // CI installs bubblewrap (scripts/setup.sh)
  escape_world w;
  REQUIRE(w.net.port > 0);
  REQUIRE(bb::test::run(bb::test::temp_dir{}, bbcluster + " keygen " + w.keys()).status == 0);
  const bool on_gpu = bb::count_gpus() > 0; // --devices 1 is then a GPU slot
  std::string run;
  int rc = w.sweep("on", corpus, "required", run);
  auto err = bb::test::read_file(run + ".err");
  INFO(err.substr(err.size() > 6000 ? err.size() - 6000 : 0));
  REQUIRE(rc == 0);

  auto jobs = finished_jobs(run);
  CHECK(jobs.size() == corpus.size());
  for (auto& op : corpus) {
    INFO(op);
    REQUIRE(jobs.count(op) == 1);
    auto& j = jobs[op];
    INFO(j.dump().substr(0, 1500));
    CHECK(j["provenance"]["sandbox"] == "namespaces");
    if (op == "ceil.default") {
      // The fork bomb hits the process limit and then the call timeout, on both attempts.
      CHECK(j["outcome"] == "timed_out");
      CHECK(j["attempt"] == 2);
    } else if (op == "floor.default" && on_gpu) {
      // On a GPU slot the full disk also breaks the runner's own CUDA work after the kernel
      // returned (seen as SIGSEGV while timing on the H200): still this kernel's job alone.
      CHECK((correct(j) || j["outcome"] == "crashed"));
    } else {
      // Signals reach nothing outside, the network and the hidden files are not there, the
      // disk filler stops at the size of its scratch folder and /tmp: the kernel goes on and
      // computes its operator.
      CHECK(correct(j));
    }
  }
  CHECK(w.markers(run).empty());
  CHECK(w.net.accepted() == 0);
  auto written = text_of(run);
  CHECK(written.find(home_secret) == std::string::npos);
  CHECK(written.find("secret-key") == std::string::npos);
  // Nothing was left in the slot's scratch folder on the host.
  std::error_code ec;
  CHECK((!fs::exists(run + "/scratch/slot0", ec) || fs::is_empty(run + "/scratch/slot0", ec)));
  auto md = bb::test::read_file(run + "/OVERALL_SUMMARY.md");
  CHECK((md.find("12 jobs: ok 11, timed_out 1") != std::string::npos
         || (on_gpu && md.find("12 jobs: crashed 1, ok 10, timed_out 1") != std::string::npos)));
  CHECK(md.find("## Sandbox") == std::string::npos);
}

TEST_CASE("the escape corpus swept with the sandbox off shows which escapes the sandbox stops",
          "[integration]") {
  REQUIRE(bb::sandbox_unavailable().empty()); // for the PID namespace around each sweep
  escape_world w;
  REQUIRE(w.net.port > 0);
  REQUIRE(bb::test::run(bb::test::temp_dir{}, bbcluster + " keygen " + w.keys()).status == 0);

  // Each kernel that signals ends the whole sweep: no reports.
  for (std::string op : {"relu.default", "abs.default", "neg.default"}) {
    INFO(op);
    std::string run;
    int rc = w.sweep("off_" + op.substr(0, op.find('.')), {op, "clone.default"}, "off", run);
    CHECK(rc != 0);
    CHECK(!fs::exists(run + "/OVERALL_SUMMARY.md"));
  }

  // The others reach the network, the home, the keys and the folders outside their scratch.
  std::string run;
  int rc = w.sweep("off_rest", {"exp.default", "sin.default", "cos.default", "tanh.default",
                                "sigmoid.default", "clone.default"}, "off", run);
  auto err = bb::test::read_file(run + ".err");
  INFO(err.substr(err.size() > 6000 ? err.size() - 6000 : 0));
  REQUIRE(rc == 0);
  auto jobs = finished_jobs(run);
  REQUIRE(jobs.size() == 6);
  CHECK(jobs["clone.default"]["provenance"]["sandbox"] == "off");
  CHECK(escaped(jobs["exp.default"]));
  CHECK(escaped(jobs["cos.default"]));
  CHECK(jobs["cos.default"]["correctness"][0]["error_msg"].get<std::string>().find(home_secret)
        != std::string::npos);
  CHECK(escaped(jobs["tanh.default"]));
  CHECK(escaped(jobs["sigmoid.default"]));
  CHECK(w.markers(run).size() == 3);
  if (!w.host.empty())
    CHECK(escaped(jobs["sin.default"]));
  CHECK(w.net.accepted() == (w.host.empty() ? 1 : 2));
  CHECK(correct(jobs["clone.default"]));
  auto md = bb::test::read_file(run + "/OVERALL_SUMMARY.md");
  CHECK(md.find("6 of 6 jobs ran with the sandbox off") != std::string::npos);
}
