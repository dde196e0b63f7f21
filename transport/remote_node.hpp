#pragma once

// The coordinator's link to one bbnode: a thread that owns a ZeroMQ DEALER socket connected
// to the node, says hello, sends heartbeats and jobs, and routes results; and one actor per
// slot of the node that the coordinator treats as an evaluator. A node silent past
// `silence_s` is lost: its slot actors quit, so the coordinator requeues their jobs for other
// slots, and results that arrive later are dropped. A lost node that answers again rejoins
// with fresh slot actors, announced to the coordinator.

#include <atomic>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "messages/types.hpp"
#include "messages/wire.hpp"

namespace bb {

struct remote_node_config {
  /// tcp://host:port of the node.
  std::string endpoint;
  /// Name for logs (the hostfile's host).
  std::string name;
  double heartbeat_s = 1.0;
  double silence_s = 10.0;
  double connect_timeout_s = 30.0;
  /// Messages larger than this are refused before they are read.
  int64_t max_message_mb = default_max_message_mb;
  /// CURVE (Z85): the node's public key and the coordinator's keypair; empty: no encryption.
  std::string node_key;
  std::string public_key;
  std::string secret_key;
  /// The sweep's settings (sweep_settings_of), sent with every hello; a node whose welcome
  /// says it applied anything else is refused. Empty: none sent, none checked.
  std::map<std::string, std::string> settings;
};

class remote_node {
public:
  remote_node(caf::actor_system& sys, remote_node_config cfg);
  ~remote_node();
  remote_node(const remote_node&) = delete;
  remote_node& operator=(const remote_node&) = delete;

  /// Connects and waits for the node's welcome; returns its slots as evaluators, or why not.
  /// Starts the link's thread.
  caf::expected<std::vector<evaluator_actor>> connect();

  /// Where a rejoining node's new slots are announced.
  void set_coordinator(coordinator_actor c);

  /// What the node said of itself, as of its last welcome (a rejoining node says it again,
  /// from the link's thread): a copy taken under the link's lock.
  node_info info() const;

  /// Says bye and stops the thread.
  void stop();

  struct shared;

private:
  caf::actor_system& sys_;
  remote_node_config cfg_;
  std::shared_ptr<shared> state_;
  std::thread thread_;
};

} // namespace bb
