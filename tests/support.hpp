#pragma once

// Helpers shared by the tests: temporary folders, file reading, running programs.

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/resource.h>
#include <unistd.h>

#include "process/files.hpp"

namespace bb::test {

/// A fresh folder under /tmp, removed with everything in it when the object goes.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/bbtest-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  // Not std::filesystem::remove_all: in a test that links libtorch it may be libtorch.so's,
  // which jumps to address 0 on a folder with contents (process/files.hpp).
  ~temp_dir() {
    std::string why_not;
    bb::remove_tree(path, why_not);
  }
  std::string operator/(const std::string& name) const {
    return path + "/" + name;
  }
};

/// A fresh folder (not removed) in none of the places a sandbox hides or replaces (/tmp, $HOME,
/// /root, /home), so a sandbox test sees its folders as a user's run would wherever the
/// checkout is: under /var/tmp, else in the working folder.
inline std::string unhidden_temp_dir(const std::string& prefix) {
  std::string base = "/var/tmp";
  std::error_code ec;
  if (!std::filesystem::is_directory(base, ec) || ::access(base.c_str(), W_OK) != 0)
    base = std::filesystem::current_path(ec).string();
  std::string tmpl = base + "/bbtest-" + prefix + "-XXXXXX";
  return std::filesystem::path(::mkdtemp(tmpl.data())).lexically_normal().string();
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// While it lives, files this process writes may grow to `bytes` at most: a write past that
/// fails with EFBIG ("File too large") as one to a full disk fails with ENOSPC, after writing
/// what fits. For tests of what a failed write leaves behind, without root or a full disk.
struct file_size_limit {
  rlimit before{};
  void (*handler)(int) = SIG_DFL;
  explicit file_size_limit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &before);
    handler = std::signal(SIGXFSZ, SIG_IGN); // else the write kills the process
    rlimit limit = before;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, handler);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;
};

} // namespace bb::test
