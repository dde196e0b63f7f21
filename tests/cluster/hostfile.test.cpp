#include <catch2/catch.hpp>

#include "cluster/hostfile.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// The one error a single bad line gives.
std::string error_of(const std::string& line) {
  auto hf = parse_hostfile("good slots=1\n" + line + "\n", "hosts.txt", 5555);
  REQUIRE(hf.errors.size() == 1);
  CHECK(hf.hosts.size() == 1);
  return hf.errors.front();
}

} // namespace

TEST_CASE("a hostfile with comments, blank lines, ports and addresses", "[cluster]") {
  auto hf = parse_hostfile("# the cluster\n"
                           "\n"
                           "worker-1 slots=4\n"
                           "   worker-2:29500\tslots=8   # the big one\n"
                           "\t\n"
                           "10.0.0.7 slots=2\r\n"
                           "10.0.0.7:7000 slots=1\n"
                           "[fe80::1]:29501 slots=2\n"
                           "[::1] slots=1#no space before the comment\n",
                           "hosts.txt", 5555);
  INFO((hf.errors.empty() ? std::string() : hf.errors.front()));
  REQUIRE(hf.errors.empty());
  REQUIRE(hf.hosts.size() == 6);
  CHECK(hf.hosts[0].host == "worker-1");
  CHECK(hf.hosts[0].port == 0);
  CHECK(hf.hosts[0].slots == 4);
  CHECK(hf.hosts[0].line == 3);
  CHECK(hf.hosts[1].host == "worker-2");
  CHECK(hf.hosts[1].port == 29500);
  CHECK(hf.hosts[1].slots == 8);
  CHECK(hf.hosts[1].line == 4);
  CHECK(hf.hosts[2].host == "10.0.0.7");
  CHECK(hf.hosts[2].port == 0);
  CHECK(hf.hosts[3].port == 7000);
  CHECK(hf.hosts[4].host == "fe80::1");
  CHECK(hf.hosts[4].port == 29501);
  CHECK(hf.hosts[4].slots == 2);
  CHECK(hf.hosts[5].host == "::1");
  CHECK(hf.hosts[5].port == 0);
  CHECK(hf.hosts[5].line == 9);
}

TEST_CASE("an empty hostfile or one of comments has no hosts and no errors", "[cluster]") {
  for (auto text : {"", "\n\n", "# nothing yet\n  # still nothing\n"}) {
    auto hf = parse_hostfile(text, "hosts.txt", 5555);
    CHECK(hf.hosts.empty());
    CHECK(hf.errors.empty());
  }
}

TEST_CASE("a duplicate host is an error naming its first line, and another port is no duplicate",
          "[cluster]") {
  auto hf = parse_hostfile("worker-1 slots=4\n"
                           "worker-1:29501 slots=4\n"
                           "worker-1 slots=2\n"
                           "WORKER-1:29501 slots=1\n"
                           "[::1]:5 slots=1\n"
                           "[::1]:5 slots=1\n",
                           "hosts.txt", 5555);
  REQUIRE(hf.hosts.size() == 3);
  CHECK(hf.hosts[0].slots == 4);
  CHECK(hf.hosts[1].port == 29501);
  CHECK(hf.hosts[2].host == "::1");
  REQUIRE(hf.errors.size() == 3);
  CHECK(hf.errors[0] == "hosts.txt:3: worker-1 is the same node as line 1 (worker-1, port 5555)");
  CHECK(hf.errors[1] == "hosts.txt:4: WORKER-1:29501 is the same node as line 2 (worker-1, port 29501)");
  CHECK(hf.errors[2] == "hosts.txt:6: [::1]:5 is the same node as line 5 (::1, port 5)");
}

TEST_CASE("a host without a port is on the default port: n1 and n1:5555 are one node", "[cluster]") {
  auto hf = parse_hostfile("n1 slots=1\nn1:5555 slots=2\nN1:5556 slots=1\n[::1]:5555 slots=1\n"
                           "[::1] slots=1\n",
                           "hosts.txt", 5555);
  REQUIRE(hf.hosts.size() == 3);
  CHECK(hf.hosts[0].line == 1);
  CHECK(hf.hosts[1].port == 5556);
  CHECK(hf.hosts[2].host == "::1");
  REQUIRE(hf.errors.size() == 2);
  CHECK(hf.errors[0] == "hosts.txt:2: n1:5555 is the same node as line 1 (n1, port 5555)");
  CHECK(hf.errors[1] == "hosts.txt:5: [::1] is the same node as line 4 (::1, port 5555)");
  // On another default port the same lines are two nodes.
  auto other = parse_hostfile("n1 slots=1\nn1:5555 slots=2\n", "hosts.txt", 6000);
  CHECK(other.errors.empty());
  CHECK(other.hosts.size() == 2);
}

TEST_CASE("node names are the host, or host-port where a host has several nodes, never shared",
          "[cluster]") {
  auto hf = parse_hostfile("n1 slots=1\nn2 slots=1\nN1:6000 slots=1\n[::1]:7 slots=1\n", "hosts.txt", 5555);
  REQUIRE(hf.errors.empty());
  CHECK(node_names(hf.hosts, 5555) == std::vector<std::string>{"n1-5555", "n2", "N1-6000", "::1"});
  // A host named like another's host-port still gets a name of its own.
  auto odd = parse_hostfile("n1 slots=1\nn1:6000 slots=1\nN1-6000:9 slots=1\n", "hosts.txt", 5555);
  REQUIRE(odd.errors.empty());
  CHECK(node_names(odd.hosts, 5555) == std::vector<std::string>{"n1-5555", "n1-6000", "N1-6000-2"});
}

TEST_CASE("every kind of bad line has its own message and is left out", "[cluster]") {
  CHECK(error_of("worker-1 slot=2")
        == "hosts.txt:2: expected 'slots=N' after the host, found 'slot=2'");
  CHECK(error_of("worker-1")
        == "hosts.txt:2: expected 'slots=N' after the host, found end of line");
  CHECK(error_of("worker-1 4") == "hosts.txt:2: expected 'slots=N' after the host, found '4'");
  CHECK(error_of("worker-1 slots=0") == "hosts.txt:2: slots must be a positive integer, not '0'");
  CHECK(error_of("worker-1 slots=") == "hosts.txt:2: slots must be a positive integer, not ''");
  CHECK(error_of("worker-1 slots=-1")
        == "hosts.txt:2: slots must be a positive integer, not '-1'");
  CHECK(error_of("worker-1 slots=2x")
        == "hosts.txt:2: slots must be a positive integer, not '2x'");
  CHECK(error_of("worker-1 slots=99999999999")
        == "hosts.txt:2: slots must be a positive integer, not '99999999999'");
  CHECK(error_of("worker-1 slots=2 slots=3")
        == "hosts.txt:2: unexpected 'slots=3' after 'slots=2'");
  CHECK(error_of("worker-1 slots=2 gpus=8") == "hosts.txt:2: unexpected 'gpus=8' after 'slots=2'");
  CHECK(error_of("worker-1:0 slots=1") == "hosts.txt:2: port must be 1..65535, not '0'");
  CHECK(error_of("worker-1:65536 slots=1") == "hosts.txt:2: port must be 1..65535, not '65536'");
  CHECK(error_of("worker-1: slots=1") == "hosts.txt:2: port must be 1..65535, not ''");
  CHECK(error_of("worker-1:http slots=1") == "hosts.txt:2: port must be 1..65535, not 'http'");
  CHECK(error_of(":29500 slots=1") == "hosts.txt:2: missing host name before ':' in ':29500'");
  CHECK(error_of("work/er slots=1") == "hosts.txt:2: bad host name 'work/er'");
  CHECK(error_of("slots=4") == "hosts.txt:2: expected a host before 'slots=4'");
  CHECK(error_of("10.0.0.256 slots=1") == "hosts.txt:2: bad IPv4 address '10.0.0.256'");
  CHECK(error_of("10.0.0 slots=1") == "hosts.txt:2: bad IPv4 address '10.0.0'");
  CHECK(error_of("fe80::1 slots=1")
        == "hosts.txt:2: an IPv6 address must be in brackets, as [addr] or [addr]:port, not "
           "'fe80::1'");
  CHECK(error_of("[fe80::1 slots=1") == "hosts.txt:2: missing ']' in host '[fe80::1'");
  CHECK(error_of("[fe80::g]:1 slots=1") == "hosts.txt:2: bad IPv6 address 'fe80::g'");
  CHECK(error_of("[worker]:1 slots=1") == "hosts.txt:2: bad IPv6 address 'worker'");
  CHECK(error_of("[::1]29500 slots=1") == "hosts.txt:2: expected ':port' after ']', found '29500'");
  CHECK(error_of("[::1]:99999 slots=1") == "hosts.txt:2: port must be 1..65535, not '99999'");
}

TEST_CASE("bad lines are left out, good ones kept, each error on its own line", "[cluster]") {
  auto hf = parse_hostfile("a slots=1\nb slots=0\n\nc slots=3\nd\n", "cluster/hosts", 5555);
  REQUIRE(hf.hosts.size() == 2);
  CHECK(hf.hosts[0].host == "a");
  CHECK(hf.hosts[1].host == "c");
  CHECK(hf.hosts[1].line == 4);
  REQUIRE(hf.errors.size() == 2);
  CHECK(hf.errors[0] == "cluster/hosts:2: slots must be a positive integer, not '0'");
  CHECK(hf.errors[1] == "cluster/hosts:5: expected 'slots=N' after the host, found end of line");
}

TEST_CASE("load_hostfile reads a file, and a missing file or a folder is one error", "[cluster]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "hosts.txt", "# two nodes\nn1 slots=2\nn2:6000 slots=1\nn1 slots=1\n");
  auto hf = load_hostfile(dir / "hosts.txt", 5555);
  REQUIRE(hf.hosts.size() == 2);
  CHECK(hf.hosts[1].port == 6000);
  REQUIRE(hf.errors.size() == 1);
  CHECK(hf.errors[0] == dir / "hosts.txt:4: n1 is the same node as line 2 (n1, port 5555)");

  bb::test::write_file(dir / "empty.txt", "");
  auto empty = load_hostfile(dir / "empty.txt", 5555);
  CHECK(empty.hosts.empty());
  CHECK(empty.errors.empty());

  auto missing = load_hostfile(dir / "nope.txt", 5555);
  CHECK(missing.hosts.empty());
  REQUIRE(missing.errors.size() == 1);
  CHECK(missing.errors[0] == dir / "nope.txt: no such hostfile");

  auto folder = load_hostfile(dir.path, 5555);
  REQUIRE(folder.errors.size() == 1);
  CHECK(folder.errors[0] == dir.path + ": is a folder, not a hostfile");
}
