#include <catch2/catch.hpp>

#include "skip.hpp"

#include <algorithm>
#include <filesystem>

#include <sys/wait.h>
#include <unistd.h>

#include "cluster/config.hpp"
#include "process/runner_supervisor.hpp"
#include "process/sandbox.hpp"
#include "process/subprocess.hpp"
#include "support.hpp"

namespace {

using words = std::vector<std::string>;

// Whether `seq` appears in `all` as consecutive words.
bool has_sequence(const words& all, const words& seq) {
  return std::search(all.begin(), all.end(), seq.begin(), seq.end()) != all.end();
}

// A fresh folder outside /tmp and the homes (the sandbox's /tmp is its own and the homes are
// hidden: nothing there is hidden or bound one by one).
struct build_dir {
  std::string path;
  build_dir() : path(bb::test::unhidden_temp_dir("sandbox")) {}
  ~build_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const {
    return path + "/" + name;
  }
};

size_t position(const words& all, const words& seq) {
  return static_cast<size_t>(std::search(all.begin(), all.end(), seq.begin(), seq.end()) - all.begin());
}

} // namespace

TEST_CASE("sandbox modes are read and written by name", "[process]") {
  bb::sandbox_mode m = bb::sandbox_mode::off;
  CHECK(bb::from_string("auto", m));
  CHECK(m == bb::sandbox_mode::automatic);
  CHECK(bb::from_string("required", m));
  CHECK(m == bb::sandbox_mode::required);
  CHECK(bb::from_string("off", m));
  CHECK(m == bb::sandbox_mode::off);
  CHECK_FALSE(bb::from_string("on", m));
  CHECK(bb::to_string(bb::sandbox_mode::automatic) == "auto");
}

TEST_CASE("the sandbox command: namespaces, read-only system, private /tmp, the program last",
          "[process]") {
  bb::sandbox_policy p;
  p.tmp_bytes = 4 << 20;
  auto cmd = bb::sandbox_command(p, {"/opt/bbrunner", "--fd", "5"}, "/usr/bin/bwrap", false);
  REQUIRE(cmd.size() > 4);
  CHECK(cmd.front() == "/usr/bin/bwrap");
  for (auto flag : {"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
                    "--unshare-ipc", "--unshare-uts"})
    CHECK(std::count(cmd.begin(), cmd.end(), flag) == 1);
  CHECK(has_sequence(cmd, {"--ro-bind", "/", "/"}));
  CHECK(has_sequence(cmd, {"--proc", "/proc"}));
  CHECK(has_sequence(cmd, {"--perms", "1777", "--size", std::to_string(4 << 20), "--tmpfs", "/tmp"}));
  CHECK(has_sequence(cmd, {"--perms", "1777", "--size", std::to_string(4 << 20), "--tmpfs", "/dev/shm"}));
  CHECK(has_sequence(cmd, {"--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--unsetenv", "TMP",
                           "--unsetenv", "TEMP"}));
  // A caller that is not root gets no capabilities to drop and keeps its own user.
  CHECK(std::count(cmd.begin(), cmd.end(), "setpriv") == 0);
  CHECK(std::count(cmd.begin(), cmd.end(), "--unshare-user") == 0);
  CHECK(words(cmd.end() - 4, cmd.end()) == words{"--", "/opt/bbrunner", "--fd", "5"});
  // Inherited descriptors are not closed: the runner's channel must reach it.
  CHECK(std::count(cmd.begin(), cmd.end(), "--close-fds") == 0);
}

TEST_CASE("the sandbox command started by root drops to the unprivileged user", "[process]") {
  bb::sandbox_policy p;
  p.unprivileged_uid = 65000;
  auto cmd = bb::sandbox_command(p, {"/bin/true"}, "bwrap", true);
  CHECK(has_sequence(cmd, {"--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"}));
  CHECK(has_sequence(cmd, {"setpriv", "--reuid", "65000", "--regid", "65000", "--clear-groups",
                           "--inh-caps=-all", "--", "/bin/true"}));
}

TEST_CASE("the sandbox command hides folders and shows what the program needs inside them",
          "[process]") {
  build_dir dir;
  for (auto sub : {"home/.cache/venv/lib", "home/keys", "work/run/scratch", "cache/objects/ab", "cache/pch"})
    std::filesystem::create_directories(dir / sub);
  bb::sandbox_policy p;
  // Nested and repeated hidden folders are hidden once, by the outer one.
  p.hidden = {dir / "home", dir / "home/keys", dir / "work/run", dir / "cache", dir / "home/"};
  p.read_only = {dir / "home/.cache/venv", dir / "cache/objects", "/usr", dir / "missing"};
  p.writable = {dir / "cache/pch"};
  p.scratch = dir / "work/run/scratch/slot3";
  p.devices = {"/dev/nvidia3", "/dev/nvidiactl"};
  auto cmd = bb::sandbox_command(p, {"/bin/true"}, "bwrap", false);
  INFO([&] {
    std::string all;
    for (auto& w : cmd)
      all += w + " ";
    return all;
  }());
  CHECK(std::count(cmd.begin(), cmd.end(), dir / "home") == 2); // --tmpfs, then --remount-ro
  CHECK(has_sequence(cmd, {"--perms", "0755", "--tmpfs", dir / "home"}));
  CHECK(has_sequence(cmd, {"--remount-ro", dir / "home"}));
  CHECK(std::count(cmd.begin(), cmd.end(), dir / "home/keys") == 0);
  CHECK(has_sequence(cmd, {"--perms", "0755", "--tmpfs", dir / "work/run"}));
  CHECK(has_sequence(cmd, {"--perms", "0755", "--tmpfs", dir / "cache"}));
  // The venv is shown read-only, its parents made searchable inside the hidden home, first.
  auto dir_made = position(cmd, {"--perms", "0755", "--dir", dir / "home/.cache"});
  auto bound = position(cmd, {"--ro-bind", dir / "home/.cache/venv", dir / "home/.cache/venv"});
  CHECK(dir_made < bound);
  CHECK(bound < cmd.size());
  CHECK(position(cmd, {"--tmpfs", dir / "home"}) < dir_made);
  CHECK(has_sequence(cmd, {"--ro-bind", dir / "cache/objects", dir / "cache/objects"}));
  CHECK(has_sequence(cmd, {"--bind", dir / "cache/pch", dir / "cache/pch"}));
  // What is visible anyway, or missing, is not bound.
  CHECK(std::count(cmd.begin(), cmd.end(), "/usr") == 0);
  CHECK(std::count(cmd.begin(), cmd.end(), dir / "missing") == 0);
  // The scratch folder: fresh, writable, sized, made inside the hidden run folder.
  CHECK(has_sequence(cmd, {"--perms", "0755", "--dir", dir / "work/run/scratch"}));
  CHECK(has_sequence(cmd, {"--perms", "1777", "--size", std::to_string(p.tmp_bytes), "--tmpfs",
                           dir / "work/run/scratch/slot3"}));
  CHECK(has_sequence(cmd, {"--chdir", dir / "work/run/scratch/slot3"}));
  // The hidden folders become read-only after everything inside them is mounted.
  CHECK(position(cmd, {"--remount-ro", dir / "work/run"}) > position(cmd, {"--tmpfs", dir / "work/run/scratch/slot3"}));
  CHECK(has_sequence(cmd, {"--dev-bind", "/dev/nvidia3", "/dev/nvidia3"}));
  CHECK(has_sequence(cmd, {"--dev-bind", "/dev/nvidiactl", "/dev/nvidiactl"}));
}

TEST_CASE("what lies in /tmp is not hidden: the sandbox's /tmp is a fresh one", "[process]") {
  bb::test::temp_dir dir;
  std::filesystem::create_directories(dir / "run");
  bb::sandbox_policy p;
  p.hidden = {dir / "run"};
  p.scratch = dir / "run/scratch/slot0";
  auto cmd = bb::sandbox_command(p, {"/bin/true"}, "bwrap", false);
  CHECK_FALSE(has_sequence(cmd, {"--tmpfs", dir / "run"}));
  CHECK_FALSE(has_sequence(cmd, {"--remount-ro", dir / "run"}));
  CHECK(has_sequence(cmd, {"--perms", "0755", "--dir", dir.path}));
  CHECK(has_sequence(cmd, {"--tmpfs", dir / "run/scratch/slot0"}));
}

TEST_CASE("a GPU slot's device nodes are its own GPU and the shared control nodes", "[process]") {
  bb::test::temp_dir dev;
  for (auto n : {"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"})
    bb::test::write_file(dev / n, "");
  auto slot1 = bb::gpu_device_nodes("1", dev.path);
  CHECK(slot1 == std::vector<std::string>{dev / "nvidia1", dev / "nvidiactl", dev / "nvidia-uvm"});
  auto all = bb::all_gpu_device_nodes(dev.path);
  CHECK(all == std::vector<std::string>{dev / "nvidia-uvm", dev / "nvidia0", dev / "nvidia1",
                                        dev / "nvidia2", dev / "nvidiactl"});
  // A GPU named by UUID cannot be mapped to its node: every node is passed.
  CHECK(bb::gpu_device_nodes("GPU-5a1b", dev.path) == all);
  // A container given the host's third GPU only: CUDA device 0 has /dev/nvidia2.
  bb::test::temp_dir box;
  for (auto n : {"nvidia2", "nvidiactl", "nvidia-uvm"})
    bb::test::write_file(box / n, "");
  CHECK(bb::gpu_device_nodes("0", box.path)
        == std::vector<std::string>{box / "nvidia-uvm", box / "nvidia2", box / "nvidiactl"});
}

TEST_CASE("a death by signal inside bwrap is described as the signal", "[process]") {
  CHECK(bb::describe_sandboxed_status(W_EXITCODE(128 + SIGSEGV, 0)) == "killed by signal 11 (SIGSEGV)");
  CHECK(bb::describe_sandboxed_status(W_EXITCODE(3, 0)) == "exited with status 3");
  CHECK(bb::describe_sandboxed_status(SIGKILL) == "killed by signal 9 (SIGKILL)");
}

TEST_CASE("the Python environment is its venv and the installation it was made from", "[process]") {
  auto folders = bb::python_environment_folders(bb::build_python());
  REQUIRE(!folders.empty());
  CHECK(std::filesystem::exists(std::filesystem::path(folders.front()) / "bin"));
  CHECK(bb::python_environment_folders("python3").empty());
}

TEST_CASE("the sandbox setting is checked", "[process]") {
  bb::test::temp_dir dir;
  bb::settings s;
  CHECK(s.sandbox == "auto");
  bb::test::write_file(dir / "a.toml", "[evaluator]\nsandbox = \"required\"\nsandbox_tmp_mb = 64\n"
                                       "[compile]\nmemory_limit_gb = 2.5\n");
  REQUIRE(!bb::load_settings(dir / "a.toml", s));
  CHECK(s.sandbox == "required");
  CHECK(s.sandbox_tmp_mb == 64);
  CHECK(s.compile_memory_limit_gb == 2.5);
  CHECK(!bb::validate(s));
  s.sandbox = "on";
  CHECK(bb::validate(s));
}

TEST_CASE("a program in the sandbox sees its own processes, no network and no home, and writes "
          "only to its scratch folder and what it is given",
          "[integration]") {
  if (auto why = bb::sandbox_unavailable(); !why.empty()) {
    BB_SKIP("no sandbox on this machine, test skipped: " << why);
  }
  build_dir dir;
  for (auto sub : {"home", "scratch/slot0", "out"})
    std::filesystem::create_directories(dir / sub);
  bb::test::write_file(dir / "home/secret.txt", "home-secret\n");
  // Writable by the unprivileged user a program started by root becomes.
  std::filesystem::permissions(dir / "out", std::filesystem::perms::all);
  std::filesystem::permissions(dir.path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read
                                             | std::filesystem::perms::group_exec
                                             | std::filesystem::perms::others_read
                                             | std::filesystem::perms::others_exec);
  bb::sandbox_policy p;
  p.mode = bb::sandbox_mode::required;
  p.hidden = {dir / "home"};
  p.writable = {dir / "out"};
  p.scratch = dir / "scratch/slot0";
  p.tmp_bytes = 4 << 20;
  p.limits.max_file_bytes = 1 << 20;
  auto out = dir / "out";
  auto script = "ls /proc | grep -c '^[0-9]' > " + out + "/procs; "
                "cat " + dir / "home/secret.txt" + " > " + out + "/home 2>/dev/null; "
                "echo x > " + dir / "home/new" + " 2>/dev/null && echo home >> " + out + "/escapes; "
                "echo x > " + dir / "escape" + " 2>/dev/null && echo root >> " + out + "/escapes; "
                "touch ./in-scratch && pwd > " + out + "/scratch; "
                "head -c 3000000 /dev/zero > ./big; stat -c %s ./big > " + out + "/big; "
                "head -c 8000000 /dev/zero > /tmp/big; stat -c %s /tmp/big > " + out + "/tmp; "
                "grep -c ':' /proc/net/dev > " + out + "/interfaces; "
                "echo x > /dev/shm/sem.test && echo shm > " + out + "/shm; "
                "id -u > " + out + "/uid; "
                "mktemp > " + out + "/mktemp";
  // A caller's TMPDIR (Slurm's per-job folder) is not shown inside: temporary files go to
  // the sandbox's /tmp.
  const char* tmpdir = std::getenv("TMPDIR");
  bool tmpdir_set = tmpdir != nullptr;
  std::string tmpdir_was = tmpdir_set ? tmpdir : "";
  ::setenv("TMPDIR", (dir / "home").c_str(), 1);
  auto r = bb::run_process({"/bin/sh", "-c", script}, dir / "log", 60, p);
  if (tmpdir_set)
    ::setenv("TMPDIR", tmpdir_was.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  INFO(r.how << "\n" << bb::test::read_file(dir / "log"));
  CHECK(r.ok());
  // The shell, ls, grep and bwrap's init: nothing of the machine's.
  CHECK(std::stoi(bb::test::read_file(out + "/procs")) <= 4);
  CHECK(bb::test::read_file(out + "/home").empty());
  CHECK(!std::filesystem::exists(out + "/escapes"));
  CHECK(!std::filesystem::exists(dir / "escape"));
  CHECK(!std::filesystem::exists(dir / "home/new"));
  CHECK(bb::test::read_file(out + "/scratch") == dir / "scratch/slot0\n");
  // The scratch folder was the sandbox's own: nothing of it is left on the host.
  CHECK(std::filesystem::is_empty(dir / "scratch/slot0"));
  CHECK(std::stoul(bb::test::read_file(out + "/big")) <= (1u << 20)); // RLIMIT_FSIZE
  CHECK(std::stoul(bb::test::read_file(out + "/tmp")) <= (4u << 20));  // the size of /tmp
  CHECK(std::stoi(bb::test::read_file(out + "/interfaces")) == 1);     // its own loopback
  // A semaphore can be made (Python's multiprocessing.Lock, FlagGems on import).
  CHECK(bb::test::read_file(out + "/shm") == "shm\n");
  if (::geteuid() == 0)
    CHECK(bb::test::read_file(out + "/uid") == std::to_string(p.unprivileged_uid) + "\n");
  CHECK(bb::test::read_file(out + "/mktemp").rfind("/tmp/", 0) == 0);
}

TEST_CASE("a runner's fatal signal is read from its own lines of the log", "[process]") {
  bb::test::temp_dir dir;
  auto log = dir / "runner.log";
  std::string earlier = "kernel output\nbbrunner: fatal signal 6 at address 0x01, instruction 0x02 in a.so + 0x03; "
                        "bbrunner was an earlier runner's step; native stack:\n/lib/a.so(+0x1)[0x2]\n";
  bb::test::write_file(log, earlier);
  // Nothing of this runner's yet: an earlier runner's line is not this one's.
  CHECK(bb::fatal_signal_line(log, earlier.size()) == "");
  CHECK(bb::fatal_signal_line(log, 0)
        == "fatal signal 6 at address 0x01, instruction 0x02 in a.so + 0x03; bbrunner was an earlier runner's step");
  bb::test::write_file(log, earlier + "more output\nbbrunner: fatal signal 11 at address 0x00, instruction 0x05 (in no "
                                       "loaded module); bbrunner was starting a job; native stack:\n/x(+0x1)[0x2]\n");
  CHECK(bb::fatal_signal_line(log, earlier.size())
        == "fatal signal 11 at address 0x00, instruction 0x05 (in no loaded module); bbrunner was starting a job");
  CHECK(bb::fatal_signal_line(dir / "missing.log", 0) == "");
}
