#include "process/frames.hpp"

#include <cerrno>
#include <chrono>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace bb::frames {

namespace {

using clock = std::chrono::steady_clock;

read_status read_exact(int fd, char* buf, size_t n, int timeout_ms, clock::time_point start) {
  size_t done = 0;
  while (done < n) {
    int wait = -1;
    if (timeout_ms >= 0) {
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
      wait = static_cast<int>(timeout_ms - elapsed.count());
      if (wait <= 0)
        return read_status::timeout;
    }
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, wait);
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return read_status::error;
    }
    if (rc == 0)
      return read_status::timeout;
    auto got = ::read(fd, buf + done, n - done);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return read_status::error;
    }
    if (got == 0)
      return read_status::closed;
    done += static_cast<size_t>(got);
  }
  return read_status::ok;
}

} // namespace

bool write_frame(int fd, const std::string& payload) {
  auto n = static_cast<uint32_t>(payload.size());
  unsigned char header[4] = {static_cast<unsigned char>(n >> 24),
                             static_cast<unsigned char>(n >> 16),
                             static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
  std::string frame(reinterpret_cast<char*>(header), 4);
  frame += payload;
  size_t done = 0;
  while (done < frame.size()) {
    // MSG_NOSIGNAL: a dead peer gives EPIPE, not a SIGPIPE that kills us.
    auto put = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    done += static_cast<size_t>(put);
  }
  return true;
}

read_status read_frame(int fd, std::string& payload, int timeout_ms) {
  auto start = clock::now();
  unsigned char header[4];
  auto st = read_exact(fd, reinterpret_cast<char*>(header), 4, timeout_ms, start);
  if (st != read_status::ok)
    return st;
  uint32_t n = (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16)
               | (uint32_t{header[2]} << 8) | uint32_t{header[3]};
  if (n > max_frame_bytes)
    return read_status::error;
  payload.assign(n, '\0');
  return n == 0 ? read_status::ok : read_exact(fd, payload.data(), n, timeout_ms, start);
}

} // namespace bb::frames
