#pragma once

// bbnode's side of the wire: a thread that owns the node's ZeroMQ ROUTER socket, answers the
// coordinator's hello and pings, hands each job to a local evaluator slot (compiling native
// kernels first) and sends results back as they arrive. One coordinator session at a time:
// another peer's hello is refused as busy (and logged, once per peer and reason a minute) until
// the session says bye or falls silent past `coordinator_silence_s`, so a stray hello cannot take
// a sweep's node and a dead coordinator leaves the node idle and ready for the next.

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "messages/types.hpp"
#include "messages/wire.hpp"

namespace bb {

/// What a node evaluates on: its evaluators, its compile pool, and the bound on one job.
struct node_slots {
  std::vector<evaluator_actor> evaluators;
  compile_pool_actor compiler;
  double evaluate_timeout_s = 3600.0;
  /// Jobs running on the evaluators now (read only): slots are not replaced under them.
  size_t jobs_in_flight = 0;
};

struct node_server_config {
  /// ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5555 or tcp://*:5555.
  std::string endpoint;
  node_info info;
  double coordinator_silence_s = 30.0;
  double evaluate_timeout_s = 3600.0;
  /// Messages larger than this are refused before they are read (ZeroMQ drops the peer).
  int64_t max_message_mb = default_max_message_mb;
  /// CURVE: the node's keypair and the only client key it accepts (the coordinator's), all
  /// Z85. Empty: no encryption, for loopback endpoints only.
  std::string public_key;
  std::string secret_key;
  std::string coordinator_key;
  /// Called with the endpoint actually bound (the port chosen for tcp://...:0), once.
  std::function<void(const std::string&)> on_bound;
  /// Applies a coordinator's sweep settings at its hello (wire_message::settings): fills
  /// `applied` with what the node evaluates with from now on, and may replace the slots (the
  /// node's evaluators and compile pool rebuilt with them); "" or why the node cannot, which
  /// refuses the coordinator (a why starting with busy_refusal: not now, greet again). Null:
  /// the node answers with no settings.
  std::function<std::string(const std::map<std::string, std::string>& sent,
                            std::map<std::string, std::string>& applied, node_slots& slots)>
    apply_settings;
};

class node_server {
public:
  node_server(caf::actor_system& sys, node_server_config cfg, std::vector<evaluator_actor> slots,
              compile_pool_actor compiler);

  /// Binds and serves until stop() or a "bye"; returns "" or why it could not serve. Blocks.
  std::string run();

  /// Makes run() return (from another thread or a signal handler's flag).
  void stop() {
    stopping_ = true;
  }

private:
  caf::actor_system& sys_;
  node_server_config cfg_;
  std::vector<evaluator_actor> slots_;
  compile_pool_actor compiler_;
  std::atomic<bool> stopping_{false};
};

} // namespace bb
