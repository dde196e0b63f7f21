#pragma once

// The wire protocol between bbcluster and bbnode: one msgpack map per ZeroMQ message, with a
// protocol version; a peer speaking another version is refused. Tensors never travel: jobs
// carry argument strings and artefact sources, results carry records.

#include <cstdint>
#include <map>
#include <string>

#include "messages/records.hpp"

namespace bb {

/// What a node announces when a coordinator says hello.
struct node_info {
  std::string name;
  uint32_t slots = 0;
  /// "cpu" or "cuda".
  std::string device;
  std::string torch_version;
  std::string build;
  MSGPACK_DEFINE_MAP(name, slots, device, torch_version, build);
};

/// The prefix of a refusal that means "serving another session now": a coordinator waits and
/// greets again (until its connect timeout) instead of giving up.
inline constexpr const char* busy_refusal = "busy: ";

/// Largest wire message taken by default, in MiB: ZeroMQ drops a peer that announces a larger
/// one before allocating it (a job of 15,000 inputs is about 2 MiB).
inline constexpr int64_t default_max_message_mb = 64;

/// What a wire message says.
BB_NAMED_ENUM(node_message,
  /// coordinator -> node: open (or greet again) a session, with the sweep's settings.
  hello,
  /// coordinator -> node: still here; answered with pong.
  ping,
  /// coordinator -> node: run `job` on `slot`.
  job,
  /// coordinator -> node: the session ends.
  bye,
  /// node -> coordinator: the session is open: the node's `node` and the settings it applied.
  welcome,
  /// node -> coordinator: the answer to ping.
  pong,
  /// node -> coordinator: a job's terminal `result`.
  result,
  /// node -> coordinator: not served, `text` says why.
  refuse,
  /// node -> coordinator: one input's records as it ended, for a job with a stream_tag: the
  /// tag in `text`, the records in `result`, the input's index in `input_index`.
  input);

/// One message either way.
struct wire_message {
  uint32_t protocol = protocol_version;
  node_message kind = node_message::hello;
  /// Why, for "refuse".
  std::string text;
  node_info node;
  /// For "job": the slot of the node that runs it.
  uint32_t slot = 0;
  eval_job job;
  eval_result result;
  /// The coordinator's session, on every message it sends: a node serves one session at a
  /// time and refuses other peers ("busy: ...") until that one says bye or falls silent.
  std::string session;
  /// "hello": the coordinator's sweep settings (messages/settings.def, scope sweep: key ->
  /// TOML value); "welcome": what the node applied, which must be the same.
  std::map<std::string, std::string> settings;
  /// For "input": the input's index among its operator's.
  uint32_t input_index = 0;
  MSGPACK_DEFINE_MAP(protocol, kind, text, node, slot, job, result, session, settings, input_index);
};

} // namespace bb
