#pragma once

// bbcluster's terminal: the live progress block, redrawn in place on stderr with log lines
// printed above it; or, when stderr is not a terminal, a plain progress line every
// progress.interval_s; or nothing (--quiet).

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <spdlog/sinks/sink.h>

#include "results/progress_board.hpp"

namespace bb {

enum class progress_mode { block, lines, off };

/// block when `fd` is a terminal, lines when it is not, off when quiet.
progress_mode choose_progress_mode(bool quiet, int fd);

class console {
public:
  console(std::shared_ptr<progress_board> board, progress_mode mode, double interval_s);
  ~console();
  console(const console&) = delete;
  console& operator=(const console&) = delete;

  /// The sink for the program's logger: in block mode it prints each line above the block.
  std::shared_ptr<spdlog::sinks::sink> sink();

  /// Starts drawing (block) or printing lines.
  void start();

  /// Draws the block one last time and leaves it on the screen; prints no more lines.
  void stop();

  struct screen;

private:
  void loop();

  std::shared_ptr<progress_board> board_;
  progress_mode mode_;
  double interval_s_;
  std::shared_ptr<screen> screen_;
  std::mutex m_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace bb
