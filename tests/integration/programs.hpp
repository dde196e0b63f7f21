#pragma once

// Helpers for tests that run the real programs: a command line with its output captured,
// child processes by name, the run journal, waiting for an exit.

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace bb::test {

struct run_result {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs a shell command line with stdout and stderr captured to files in `dir`.
inline run_result run(const temp_dir& dir, const std::string& command) {
  auto line = command + " >" + dir / "stdout" + " 2>" + dir / "stderr" + " </dev/null";
  int raw = std::system(line.c_str());
  run_result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(dir / "stdout");
  r.err = read_file(dir / "stderr");
  return r;
}

/// The journal's lines; with `event`, only those of that event ("job_finished", ...).
inline std::vector<nlohmann::json> journal_lines(const std::string& path, const std::string& event = "") {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (event.empty() || j["event"] == event)
      out.push_back(j);
  }
  return out;
}

/// Children of `parent` whose command name is `name`.
inline std::vector<pid_t> children_named(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  while (auto* entry = ::readdir(proc)) {
    pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0)
      continue;
    auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos)
      continue;
    if (stat.substr(open + 1, close - open - 1) == name && std::atoi(stat.c_str() + close + 4) == parent)
      out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

/// Descendants of `parent` whose command name is `name`, however deep (a sandboxed runner is
/// a grandchild, under bwrap).
inline std::vector<pid_t> descendants_named(pid_t parent, const std::string& name) {
  std::vector<pid_t> out, frontier{parent};
  while (!frontier.empty()) {
    auto p = frontier.back();
    frontier.pop_back();
    DIR* proc = ::opendir("/proc");
    while (auto* entry = ::readdir(proc)) {
      pid_t pid = std::atoi(entry->d_name);
      if (pid <= 0)
        continue;
      auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
      auto open = stat.find('('), close = stat.rfind(')');
      if (open == std::string::npos || close == std::string::npos || std::atoi(stat.c_str() + close + 4) != p)
        continue;
      frontier.push_back(pid);
      if (stat.substr(open + 1, close - open - 1) == name)
        out.push_back(pid);
    }
    ::closedir(proc);
  }
  return out;
}

/// Waits up to `seconds` for `pid` to exit: its exit status, -1 when a signal ended it, -2
/// when it had to be killed.
/// Nine operators of one large-ish input each: about a second a job on a small CPU, so that a
/// sweep of them lasts long enough to be interrupted, killed or joined mid-way.
inline const char* nine_ops =
  "Operator: aten.relu.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.abs.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.neg.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.sin.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.cos.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.exp.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.sqrt.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.tanh.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n"
  "Operator: aten.sigmoid.default\ncnt: 1, ((T([2048, 2048], f32),), {})\n";

inline int wait_exit(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 20; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -2;
}

} // namespace bb::test
