#pragma once

// The evaluator <-> bbrunner protocol: length-prefixed msgpack maps over a dedicated socket
// (never the kernel's stdout or stderr). The runner speaks first with a hello.

#include <string>

#include "messages/records.hpp"

namespace bb {

/// Evaluator -> runner.
struct runner_request {
  /// "evaluate" (run `job`) or "stop" (exit cleanly).
  std::string kind;
  eval_job job;
  MSGPACK_DEFINE_MAP(kind, job);
};

/// Runner -> evaluator.
struct runner_reply {
  /// "hello" (once, at start: protocol and where), "result" (one per job), "log" (text).
  std::string kind;
  uint32_t protocol = protocol_version;
  std::string text;
  provenance where;
  eval_result result;
  MSGPACK_DEFINE_MAP(kind, protocol, text, where, result);
};

/// Packs any msgpack-defined value into a byte string.
template <class T>
std::string pack(const T& x) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, x);
  return std::string(buf.data(), buf.size());
}

/// Unpacks a byte string; throws msgpack exceptions on malformed input (callers at the
/// process edge turn them into errors).
template <class T>
T unpack(const std::string& bytes) {
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  return handle.get().as<T>();
}

} // namespace bb
