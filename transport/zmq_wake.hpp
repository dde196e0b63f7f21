#pragma once

// ZeroMQ plumbing shared by the node server and the coordinator's node links: a poll that
// survives signals, and the inproc wake-up that lets other threads hand work to the thread
// owning a socket.

#include <cerrno>
#include <chrono>
#include <string>

#include <zmq.hpp>

namespace bb {

/// zmq::poll over `items`; false when a signal interrupted it (the caller loops again).
template <size_t N>
bool poll_some(zmq::pollitem_t (&items)[N], int timeout_ms) {
  try {
    zmq::poll(items, N, std::chrono::milliseconds(timeout_ms));
    return true;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR)
      return false;
    throw;
  }
}

/// Wakes the thread polling the PULL socket bound at `endpoint`: one byte from a fresh PUSH.
inline void wake(zmq::context_t& ctx, const std::string& endpoint) {
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 100);
  push.connect(endpoint);
  push.send(zmq::str_buffer("!"), zmq::send_flags::dontwait);
}

/// Empties the PULL socket of wake-up bytes.
inline void drain(zmq::socket_t& pull) {
  zmq::message_t byte;
  while (pull.recv(byte, zmq::recv_flags::dontwait)) {
  }
}

} // namespace bb
