#include "results/run_lock.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace bb {

namespace {

// What the holder wrote ("pid N\ncommand ...\n"); it may not have written it yet.
std::string describe_holder(int fd) {
  for (int tries = 0; tries < 20; ++tries) {
    std::string text;
    char buf[4096];
    ssize_t n = 0;
    for (off_t at = 0; (n = ::pread(fd, buf, sizeof(buf), at)) > 0; at += n)
      text.append(buf, static_cast<size_t>(n));
    std::istringstream in(text);
    std::string pid, command;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("pid ", 0) == 0)
        pid = line.substr(4);
      else if (line.rfind("command ", 0) == 0)
        command = line.substr(8);
    }
    if (!pid.empty())
      return "pid " + pid + (command.empty() ? std::string() : ": " + command);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "a process that has not said who it is";
}

} // namespace

run_lock::~run_lock() {
  release();
}

run_lock::run_lock(run_lock&& other) noexcept : fd_(other.fd_), made_(std::move(other.made_)) {
  other.fd_ = -1;
  other.made_.clear();
}

run_lock& run_lock::operator=(run_lock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    made_ = std::move(other.made_);
    other.fd_ = -1;
    other.made_.clear();
  }
  return *this;
}

void run_lock::release() {
  if (fd_ < 0)
    return;
  if (!made_.empty()) {
    // Removed while still locked: a sweep trying the folder meanwhile is refused rather than
    // handed a lock on a file about to go.
    std::error_code ec;
    size_t entries = 0;
    bool only_lock = true;
    for (std::filesystem::directory_iterator it(made_, ec), end; !ec && it != end; it.increment(ec)) {
      ++entries;
      only_lock = only_lock && it->path().filename() == ".lock";
    }
    if (!ec && entries == 1 && only_lock) {
      std::filesystem::remove(std::filesystem::path(made_) / ".lock", ec);
      std::filesystem::remove(made_, ec);
    }
  }
  ::close(fd_); // and with it the lock
  fd_ = -1;
  made_.clear();
}

std::string run_lock::acquire(const std::string& run_dir, const std::string& command) {
  release();
  std::error_code ec;
  bool made = std::filesystem::create_directories(run_dir, ec);
  if (ec)
    return "cannot create " + run_dir + ": " + ec.message();
  auto path = (std::filesystem::path(run_dir) / ".lock").string();
  // Close-on-exec: the nodes and runners this sweep starts must not hold its folder.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return "cannot open " + path + ": " + std::strerror(errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string why = err == EWOULDBLOCK
                        ? run_dir + " is in use by another sweep (" + describe_holder(fd)
                            + "): one sweep per run folder; wait for it to end, or give another --log-dir"
                        : "cannot lock " + path + ": " + std::strerror(err);
    ::close(fd);
    return why;
  }
  auto text = "pid " + std::to_string(::getpid()) + "\ncommand " + command + "\n";
  if (::ftruncate(fd, 0) != 0
      || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    int err = errno;
    ::close(fd);
    return "cannot write " + path + ": " + std::strerror(err);
  }
  fd_ = fd;
  made_ = made ? run_dir : "";
  return "";
}

} // namespace bb
