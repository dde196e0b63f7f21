#include "cluster/local_nodes.hpp"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "process/proc.hpp"

namespace bb {

namespace fs = std::filesystem;

namespace {

struct node_record {
  std::string path;
  std::string name;
  pid_t node = 0;
  unsigned long long node_start = 0;
  pid_t coordinator = 0;
  unsigned long long coordinator_start = 0;
};

bool read_record(const fs::path& path, node_record& out) {
  std::ifstream in(path);
  out.path = path.string();
  out.name = path.stem().string();
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string what;
    long long pid = 0;
    unsigned long long start = 0;
    if (!(words >> what >> pid >> start) || pid <= 0)
      return false;
    if (what == "node") {
      out.node = static_cast<pid_t>(pid);
      out.node_start = start;
    } else if (what == "coordinator") {
      out.coordinator = static_cast<pid_t>(pid);
      out.coordinator_start = start;
    }
  }
  return out.node > 0 && out.coordinator > 0;
}

// Whether `pid` is the process that started at `start` and has not ended.
bool running(pid_t pid, unsigned long long start) {
  auto st = read_proc_stat(pid);
  return st && st->start == start && st->state != 'Z' && st->state != 'X';
}

// Whether `pid` runs bbnode with its --endpoint-file in `nodes_dir`.
bool serves_folder(pid_t pid, const fs::path& nodes_dir) {
  auto args = read_proc_cmdline(pid);
  if (args.empty() || fs::path(args[0]).filename() != "bbnode")
    return false;
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] != "--endpoint-file")
      continue;
    fs::path file = args[i + 1];
    if (file.is_relative())
      file = fs::path(read_proc_cwd(pid)) / file;
    std::error_code ec;
    return fs::weakly_canonical(file.parent_path(), ec) == fs::weakly_canonical(nodes_dir, ec);
  }
  return false;
}

std::vector<node_record> read_records(const std::string& nodes_dir) {
  std::vector<node_record> out;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(nodes_dir, ec)) {
    node_record r;
    if (entry.path().extension() == ".pid" && read_record(entry.path(), r))
      out.push_back(r);
  }
  return out;
}

bool left_behind(const node_record& r, const std::string& nodes_dir) {
  return running(r.node, r.node_start) && !running(r.coordinator, r.coordinator_start)
         && serves_folder(r.node, nodes_dir);
}

} // namespace

std::string local_node_record_path(const std::string& nodes_dir, const std::string& name) {
  return (fs::path(nodes_dir) / (name + ".pid")).string();
}

std::string record_local_node(const std::string& nodes_dir, const std::string& name, pid_t node) {
  auto self = read_proc_stat(::getpid());
  auto child = read_proc_stat(node);
  if (!self || !child)
    return "cannot record node " + name + ": /proc has no process "
           + std::to_string(self ? node : ::getpid());
  auto path = local_node_record_path(nodes_dir, name);
  std::ofstream out(path, std::ios::trunc);
  out << "node " << node << " " << child->start << "\n"
      << "coordinator " << self->pid << " " << self->start << "\n";
  if (!out.flush())
    return "cannot write " + path;
  return "";
}

std::vector<left_node> find_left_nodes(const std::string& nodes_dir) {
  std::vector<left_node> out;
  for (auto& r : read_records(nodes_dir))
    if (left_behind(r, nodes_dir))
      out.push_back({r.name, r.node, r.coordinator});
  return out;
}

std::vector<left_node> end_left_nodes(const std::string& nodes_dir, double grace_s) {
  std::vector<node_record> ending;
  std::vector<left_node> out;
  std::error_code ec;
  for (auto& r : read_records(nodes_dir)) {
    if (left_behind(r, nodes_dir)) {
      ::kill(r.node, SIGTERM); // a bbnode stops its runners on SIGTERM
      ending.push_back(r);
      out.push_back({r.name, r.node, r.coordinator});
    } else if (!running(r.node, r.node_start)) {
      fs::remove(r.path, ec);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (auto& r : ending) {
    while (running(r.node, r.node_start) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (running(r.node, r.node_start))
      ::kill(r.node, SIGKILL);
    fs::remove(r.path, ec);
  }
  return out;
}

} // namespace bb
