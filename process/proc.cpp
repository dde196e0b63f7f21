#include "process/proc.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <unistd.h>

namespace bb {

std::optional<proc_stat> read_proc_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f)
    return std::nullopt;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  return parse_proc_stat(std::string(buf, n));
}

std::optional<proc_stat> parse_proc_stat(const std::string& line) {
  // The command name is in parentheses and may hold anything: the fields follow the last ')'.
  const char* buf = line.c_str();
  const char* open = std::strchr(buf, '(');
  const char* close = std::strrchr(buf, ')');
  if (!open || !close || close < open)
    return std::nullopt;
  proc_stat out;
  out.pid = static_cast<pid_t>(std::atoi(buf));
  out.name.assign(open + 1, close);
  int ppid = 0;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
  // cstime priority nice threads itrealvalue starttime
  if (std::sscanf(close + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  &out.state, &ppid, &out.start) != 3)
    return std::nullopt;
  out.ppid = ppid;
  return out;
}

std::vector<std::string> read_proc_cmdline(pid_t pid) {
  std::vector<std::string> out;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/cmdline", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f)
    return out;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;)
    text.append(buf, n);
  std::fclose(f);
  // NUL-terminated arguments, one after the other.
  for (size_t at = 0; at < text.size();) {
    auto end = text.find('\0', at);
    if (end == std::string::npos)
      end = text.size();
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::string read_proc_cwd(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/cwd", static_cast<int>(pid));
  char target[4096];
  ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

std::vector<long> numbered_entries(const char* dir) {
  std::vector<long> out;
  DIR* d = ::opendir(dir);
  if (!d)
    return out;
  while (auto* entry = ::readdir(d)) {
    char* end = nullptr;
    long n = std::strtol(entry->d_name, &end, 10);
    if (n > 0 && *end == '\0')
      out.push_back(n);
  }
  ::closedir(d);
  return out;
}

std::vector<proc_stat> children_of(pid_t parent) {
  std::vector<proc_stat> out;
  for (long pid : numbered_entries("/proc"))
    if (auto st = read_proc_stat(static_cast<pid_t>(pid)); st && st->ppid == parent)
      out.push_back(*st);
  return out;
}

} // namespace bb
