#include "process/sandbox.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process/runner_supervisor.hpp"
#include "process/spawn.hpp"

namespace bb {

namespace fs = std::filesystem;

std::string to_string(sandbox_mode m) {
  switch (m) {
    case sandbox_mode::automatic: return "auto";
    case sandbox_mode::required: return "required";
    case sandbox_mode::off: return "off";
  }
  return "?";
}

bool from_string(const std::string& text, sandbox_mode& out) {
  for (auto m : {sandbox_mode::automatic, sandbox_mode::required, sandbox_mode::off})
    if (text == to_string(m)) {
      out = m;
      return true;
    }
  return false;
}

namespace {

// Whether `path` is `root` or lies below it (both lexically normal, absolute).
bool is_within(const std::string& path, const std::string& root) {
  if (root == "/")
    return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0
                          && path[root.size()] == '/');
}

std::string normal(const std::string& p) {
  auto n = fs::path(p).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/')
    n.pop_back();
  return n;
}

// Builds the argument list step by step: the folders made inside fresh tmpfs mounts before
// something is mounted below them, each once.
class command_builder {
public:
  explicit command_builder(std::vector<std::string>& out) : out_(out) {
  }

  void add(std::initializer_list<std::string> words) {
    out_.insert(out_.end(), words);
  }

  void fresh_root(const std::string& dir) {
    roots_.push_back(dir);
  }

  bool inside_fresh_root(const std::string& path) const {
    return std::any_of(roots_.begin(), roots_.end(),
                       [&](auto& r) { return is_within(path, r) && path != r; });
  }

  // The folders between the deepest fresh mount that holds `path` and `path` itself, so that
  // they are searchable by the unprivileged user the program runs as.
  void make_parents(const std::string& path) {
    std::string root;
    for (auto& r : roots_)
      if (is_within(path, r) && path != r && r.size() > root.size())
        root = r;
    if (root.empty())
      return;
    std::vector<std::string> chain;
    for (auto p = fs::path(path).parent_path(); p.string().size() > root.size(); p = p.parent_path())
      chain.push_back(p.string());
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      if (made_.insert(*it).second)
        add({"--perms", "0755", "--dir", *it});
  }

private:
  std::vector<std::string>& out_;
  std::vector<std::string> roots_;
  std::set<std::string> made_;
};

} // namespace

std::vector<std::string> sandbox_command(const sandbox_policy& p, const std::vector<std::string>& argv,
                                         const std::string& bwrap, bool as_root) {
  std::vector<std::string> out{bwrap};
  command_builder b(out);
  // Namespaces: its own processes, no network but its own loopback, no IPC or host name of
  // the machine's. A non-root caller gets a user namespace from bwrap itself; root does not
  // need one and must not get one, so that the program can drop to an unprivileged user.
  b.add({"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
         "--unshare-uts", "--unshare-cgroup-try"});
  b.add({"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"});
  auto size = std::to_string(p.tmp_bytes);
  b.add({"--perms", "1777", "--size", size, "--tmpfs", "/tmp"});
  b.fresh_root("/tmp");
  // POSIX semaphores and shared memory (Python's multiprocessing.Lock, which FlagGems makes on
  // import) live in /dev/shm: a private one, as large as /tmp, writable by the program.
  b.add({"--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"});
  // /run holds the machine's service sockets (a network namespace does not stop a Unix socket).
  b.add({"--perms", "0755", "--tmpfs", "/run"});
  b.fresh_root("/run");
  for (auto& d : p.devices)
    b.add({"--dev-bind", d, d});
  // Hidden folders, outermost first; one inside another is hidden with it.
  std::vector<std::string> hidden;
  for (auto& h : p.hidden)
    if (!h.empty() && h[0] == '/')
      hidden.push_back(normal(h));
  std::sort(hidden.begin(), hidden.end());
  hidden.erase(std::unique(hidden.begin(), hidden.end()), hidden.end());
  std::vector<std::string> mounted_hidden;
  for (auto& h : hidden) {
    std::error_code ec;
    if (h == "/" || !fs::is_directory(h, ec))
      continue;
    if (std::any_of(mounted_hidden.begin(), mounted_hidden.end(), [&](auto& o) { return is_within(h, o); }))
      continue;
    if (b.inside_fresh_root(h))
      continue; // under /tmp or /run: not there at all
    b.add({"--perms", "0755", "--tmpfs", h});
    b.fresh_root(h);
    mounted_hidden.push_back(h);
  }
  for (auto& r : p.read_only) {
    auto path = normal(r);
    std::error_code ec;
    // What is not inside a fresh mount is already visible, read-only.
    if (path.empty() || path[0] != '/' || !fs::exists(path, ec) || !b.inside_fresh_root(path))
      continue;
    b.make_parents(path);
    b.add({"--ro-bind", path, path});
  }
  for (auto& w : p.writable) {
    auto path = normal(w);
    std::error_code ec;
    if (path.empty() || path[0] != '/' || !fs::exists(path, ec))
      continue;
    b.make_parents(path);
    b.add({"--bind", path, path});
  }
  if (!p.scratch.empty()) {
    auto path = normal(p.scratch);
    b.make_parents(path);
    b.add({"--perms", "1777", "--size", size, "--tmpfs", path});
  }
  for (auto& h : mounted_hidden)
    b.add({"--remount-ro", h});
  // The home is hidden: caches a program keeps under it go to the private /tmp. So do
  // temporary files: a caller's TMPDIR (Slurm's per-job folder, a benchmark's own) is a path
  // the sandbox does not show, where nothing could be made.
  b.add({"--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--unsetenv", "TMP", "--unsetenv", "TEMP",
         "--chdir", p.scratch.empty() ? "/" : normal(p.scratch)});
  if (as_root) {
    auto uid = std::to_string(p.unprivileged_uid);
    b.add({"--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
           "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--inh-caps=-all", "--"});
  } else {
    b.add({"--"});
  }
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string bwrap_program() {
  const char* path = std::getenv("PATH");
  return find_in_path("bwrap", path ? path : "/usr/bin:/bin");
}

namespace {

// Runs a trivial program in a sandbox like the real ones: "" when it worked, else bwrap's
// complaint.
std::string try_sandbox() {
  auto bwrap = bwrap_program();
  if (bwrap.empty())
    return "bwrap (bubblewrap) is not installed";
  sandbox_policy p;
  p.tmp_bytes = 1 << 20;
  p.hidden = default_hidden_folders();
  bool root = ::geteuid() == 0;
  if (root && ::access("/usr/bin/setpriv", X_OK) != 0 && ::access("/bin/setpriv", X_OK) != 0)
    return "setpriv (util-linux) is not installed";
  spawn_spec check;
  check.argv = sandbox_command(p, {"/bin/true"}, bwrap, root);
  check.in = stdio_spec::null();
  check.out = stdio_spec::null();
  check.err = stdio_spec::pipe();
  auto child = spawn_process(check);
  if (!child.ok())
    return child.error;
  pid_t pid = child.pid;
  ::fcntl(child.err, F_SETFL, O_NONBLOCK);
  std::string err;
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    // Read after the exit is seen too: bwrap's complaint comes right before it.
    bool exited = ::waitpid(pid, &status, WNOHANG) == pid;
    char buf[512];
    ssize_t n;
    while ((n = ::read(child.err, buf, sizeof(buf))) > 0)
      err.append(buf, static_cast<size_t>(n));
    if (exited)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(child.err);
      return "bwrap did not finish a trivial sandbox in 20 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::close(child.err);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return "";
  while (!err.empty() && (err.back() == '\n' || err.back() == ' '))
    err.pop_back();
  return bwrap + " cannot make namespaces here (" + describe_wait_status(status)
         + (err.empty() ? "" : ": " + err.substr(0, 300)) + ")";
}

} // namespace

std::string sandbox_unavailable() {
  static std::mutex m;
  static bool tried = false;
  static std::string why;
  std::lock_guard<std::mutex> guard(m);
  if (!tried) {
    why = try_sandbox();
    tried = true;
  }
  return why;
}

sandbox_decision decide_sandbox(sandbox_mode mode) {
  sandbox_decision d;
  if (mode == sandbox_mode::off) {
    d.label = "off";
    return d;
  }
  auto why = sandbox_unavailable();
  if (why.empty()) {
    d.wrap = true;
    d.label = "namespaces";
  } else if (mode == sandbox_mode::required) {
    d.refusal = "evaluator.sandbox = \"required\" but no sandbox can run here: " + why;
  } else {
    d.label = "none: " + why;
  }
  return d;
}

std::vector<std::string> gpu_device_nodes(const std::string& gpu, const std::string& dev) {
  std::vector<std::string> out;
  std::error_code ec;
  bool numeric = !gpu.empty() && gpu.find_first_not_of("0123456789") == std::string::npos;
  // A GPU named by UUID, or a container whose one GPU keeps its host node's number
  // (/dev/nvidia3 as CUDA device 0): the slot cannot be matched to its node, so every GPU
  // node present is passed (the container already holds only its own).
  if (!numeric || !fs::exists(dev + "/nvidia" + gpu, ec))
    return all_gpu_device_nodes(dev);
  for (auto name : {"nvidia" + gpu, std::string("nvidiactl"), std::string("nvidia-uvm"),
                    std::string("nvidia-uvm-tools"), std::string("nvidia-modeset")})
    if (fs::exists(dev + "/" + name, ec))
      out.push_back(dev + "/" + name);
  return out;
}

std::vector<std::string> all_gpu_device_nodes(const std::string& dev) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dev, ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && name != "nvidia-caps")
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> default_hidden_folders() {
  std::vector<std::string> out;
  if (const char* home = std::getenv("HOME"); home && *home == '/')
    out.push_back(home);
  out.push_back("/root");
  out.push_back("/home");
  return out;
}

std::vector<std::string> python_environment_folders(const std::string& python) {
  std::vector<std::string> out;
  if (python.empty() || python[0] != '/')
    return out;
  // .../venv/bin/python: the venv; and the installation its executable belongs to.
  out.push_back(fs::path(python).parent_path().parent_path().string());
  std::error_code ec;
  auto real = fs::canonical(python, ec);
  if (!ec) {
    auto base = real.parent_path().parent_path().string();
    if (base != out.front())
      out.push_back(base);
  }
  return out;
}

std::string describe_sandboxed_status(int wait_status) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) > 128 && WEXITSTATUS(wait_status) < 128 + 65)
    return describe_wait_status(WEXITSTATUS(wait_status) - 128);
  return describe_wait_status(wait_status);
}

} // namespace bb
