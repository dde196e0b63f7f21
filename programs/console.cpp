#include "programs/console.hpp"

#include <cstdio>

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace bb {

// The block on stderr and what is needed to erase it: shared by the drawing thread and the
// log sink, which print through it one at a time.
struct console::screen {
  std::mutex m;
  size_t drawn = 0;
  bool live = false;
  std::shared_ptr<progress_board> board;

  static size_t width() {
    winsize w{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0)
      return w.ws_col;
    return 100;
  }

  // Callers hold m.
  void erase() {
    if (drawn > 0)
      std::fprintf(stderr, "\r\x1b[%zuA\x1b[J", drawn);
    drawn = 0;
  }

  void draw() {
    if (!live)
      return;
    auto lines = render_progress_block(board->snapshot(), width() - 1);
    for (auto& l : lines)
      std::fprintf(stderr, "%s\n", l.c_str());
    drawn = lines.size();
  }
};

namespace {

// Prints each log line above the block, then draws the block again.
class above_block_sink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
public:
  explicit above_block_sink(std::shared_ptr<console::screen> s) : screen_(std::move(s)) {
  }

protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> guard(screen_->m);
    spdlog::memory_buf_t text;
    formatter_->format(msg, text);
    screen_->erase();
    std::fwrite(text.data(), 1, text.size(), stderr);
    screen_->draw();
    std::fflush(stderr);
  }

  void flush_() override {
    std::fflush(stderr);
  }

private:
  std::shared_ptr<console::screen> screen_;
};

} // namespace

progress_mode choose_progress_mode(bool quiet, int fd) {
  if (quiet)
    return progress_mode::off;
  return ::isatty(fd) ? progress_mode::block : progress_mode::lines;
}

console::console(std::shared_ptr<progress_board> board, progress_mode mode, double interval_s)
  : board_(std::move(board)), mode_(mode), interval_s_(interval_s), screen_(std::make_shared<screen>()) {
  screen_->board = board_;
}

console::~console() {
  stop();
}

std::shared_ptr<spdlog::sinks::sink> console::sink() {
  if (mode_ == progress_mode::block)
    return std::make_shared<above_block_sink>(screen_);
  return std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
}

void console::start() {
  if (mode_ == progress_mode::off || thread_.joinable())
    return;
  if (mode_ == progress_mode::block) {
    std::lock_guard<std::mutex> guard(screen_->m);
    screen_->live = true;
    screen_->draw();
    std::fflush(stderr);
  }
  thread_ = std::thread([this] { loop(); });
}

void console::loop() {
  auto period = std::chrono::duration<double>(mode_ == progress_mode::block ? 0.5 : interval_s_);
  std::unique_lock<std::mutex> lock(m_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    if (mode_ == progress_mode::lines) {
      spdlog::info("bbcluster: {}", render_progress_line(board_->snapshot()));
      continue;
    }
    std::lock_guard<std::mutex> guard(screen_->m);
    screen_->erase();
    screen_->draw();
    std::fflush(stderr);
  }
}

void console::stop() {
  {
    std::lock_guard<std::mutex> guard(m_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> guard(screen_->m);
  if (screen_->live) {
    screen_->erase();
    screen_->draw();
    screen_->drawn = 0; // stays on the screen; what follows goes below it
    screen_->live = false;
    std::fflush(stderr);
  }
}

} // namespace bb
