#pragma once

// What Linux's /proc says of processes: one process's stat line, its command line and working
// folder, a process's children.

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace bb {

/// The fields of /proc/<pid>/stat that bbcluster uses.
struct proc_stat {
  pid_t pid = 0;
  std::string name; ///< the command name, as in parentheses in the stat line
  char state = '?'; ///< R, S, D, Z, X, ...
  pid_t ppid = 0;
  unsigned long long start = 0; ///< start time in clock ticks since boot: tells a process from a later one with its number
};

/// /proc/<pid>/stat, or nothing when there is no such process.
std::optional<proc_stat> read_proc_stat(pid_t pid);

/// A stat line as /proc/<pid>/stat has it; nothing when it is not one.
std::optional<proc_stat> parse_proc_stat(const std::string& line);

/// /proc/<pid>/cmdline: the program's arguments, argv[0] first; empty when there is no such
/// process (or it is a zombie, or not ours to read).
std::vector<std::string> read_proc_cmdline(pid_t pid);

/// Where /proc/<pid>/cwd points; "" when it cannot be read.
std::string read_proc_cwd(pid_t pid);

/// The processes whose parent is `parent`.
std::vector<proc_stat> children_of(pid_t parent);

/// The entries of the folder `dir` named by a positive number, as numbers: the processes of
/// /proc, the threads of /proc/self/task. Empty when it cannot be read.
std::vector<long> numbered_entries(const char* dir);

} // namespace bb
