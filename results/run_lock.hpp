#pragma once

// One sweep per run folder: a sweep holds an exclusive flock(2) on `<run dir>/.lock` for as
// long as it runs (the kernel lets go when the process ends, however it ends: a killed sweep's
// folder can be resumed at once), and the file says who holds it, for the refusal a second
// sweep into the folder gets. No actors here.

#include <string>

namespace bb {

class run_lock {
public:
  run_lock() = default;
  ~run_lock();
  run_lock(run_lock&& other) noexcept;
  run_lock& operator=(run_lock&& other) noexcept;
  run_lock(const run_lock&) = delete;
  run_lock& operator=(const run_lock&) = delete;

  /// Takes the lock of `run_dir` (made if missing) for this process, recording its pid and
  /// `command`. "" or why not; when another process holds it: "<run_dir> is in use by another
  /// sweep (pid N: its command) ...".
  std::string acquire(const std::string& run_dir, const std::string& command);

  /// Whether this object holds a lock.
  bool held() const {
    return fd_ >= 0;
  }

  /// Lets go (as the destructor does). A folder the lock made and nothing else used (a sweep
  /// refused before it wrote anything) goes with it.
  void release();

private:
  int fd_ = -1;
  /// The run folder when acquire() made it, else empty.
  std::string made_;
};

} // namespace bb
