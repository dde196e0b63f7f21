#pragma once

// ZeroMQ plumbing shared by the node server and the coordinator's node links: a poll that
// survives signals, the inproc wake-up that lets other threads hand work to the thread
// owning a socket, and a socket's monitor (what never reaches it as a message).

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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

/// One event of a socket's monitor: what happened (ZMQ_EVENT_...) and its value (an errno,
/// a protocol error code, a file descriptor).
struct monitor_event {
  uint16_t event = 0;
  uint32_t value = 0;
};

/// Watches `watched` for `events` through `monitor`, a PAIR socket of the same context, named
/// after `owner`; false when ZeroMQ would not.
inline bool start_monitor(zmq::socket_t& watched, zmq::socket_t& monitor, const void* owner, int events) {
  std::ostringstream name;
  name << "inproc://bb-monitor-" << owner;
  if (zmq_socket_monitor(watched.handle(), name.str().c_str(), events) != 0)
    return false;
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(name.str());
  return true;
}

/// The next event waiting on `monitor` (start_monitor's), nullopt when none is.
inline std::optional<monitor_event> next_monitor_event(zmq::socket_t& monitor) {
  for (;;) {
    zmq::message_t head, address;
    if (!monitor.recv(head, zmq::recv_flags::dontwait))
      return std::nullopt;
    if (head.more())
      (void)monitor.recv(address);
    if (head.size() < sizeof(uint16_t) + sizeof(uint32_t))
      continue;
    monitor_event e;
    std::memcpy(&e.event, head.data(), sizeof(e.event));
    std::memcpy(&e.value, static_cast<const char*>(head.data()) + sizeof(e.event), sizeof(e.value));
    return e;
  }
}

/// One ZAP request (RFC 27) answered on `zap` (a REP bound to inproc://zeromq.zap.01): a CURVE
/// peer whose public key (32 bytes) is `allowed` passes, others are refused with `refusal`.
struct zap_verdict {
  bool asked = false; ///< a request was there
  bool ok = false;
  std::string address; ///< the peer's address
  std::string key;     ///< the refused peer's public key in Z85, "(none)" without one
};

inline zap_verdict answer_zap(zmq::socket_t& zap, const std::string& allowed, const std::string& refusal) {
  zap_verdict v;
  std::vector<zmq::message_t> frames;
  for (;;) {
    zmq::message_t part;
    if (!zap.recv(part, zmq::recv_flags::dontwait))
      break;
    bool more = part.more();
    frames.push_back(std::move(part));
    if (!more)
      break;
  }
  if (frames.size() < 6)
    return v;
  v.asked = true;
  v.ok = frames.size() >= 7 && frames[5].to_string() == "CURVE" && frames[6].to_string() == allowed;
  v.address = frames[3].to_string();
  v.key = "(none)";
  if (!v.ok && frames.size() >= 7 && frames[6].size() == 32) {
    char z85[41] = {};
    if (zmq_z85_encode(z85, static_cast<const uint8_t*>(frames[6].data()), 32))
      v.key = z85;
  }
  zap.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  zap.send(frames[1], zmq::send_flags::sndmore);
  zap.send(zmq::buffer(std::string(v.ok ? "200" : "400")), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(v.ok ? std::string("OK") : refusal), zmq::send_flags::sndmore);
  zap.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  zap.send(zmq::str_buffer(""));
  return v;
}

} // namespace bb
