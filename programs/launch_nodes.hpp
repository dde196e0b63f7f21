#pragma once

// bbcluster's nodes for --nodes hosts.txt: started by a launcher (none: already running;
// local: bbnode processes on this machine), linked over ZeroMQ, their slots handed to the
// coordinator as evaluators. Wiring only.

#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include <caf/actor_system.hpp>

#include "transport/remote_node.hpp"
#include "cluster/config.hpp"

namespace bb {

struct cluster_request {
  std::string hostfile;
  /// "none" or "local".
  std::string launcher = "none";
  /// --config, passed on to nodes a launcher starts.
  std::string config;
  /// Where launched nodes keep their logs.
  std::string log_dir;
  settings s;
};

struct cluster {
  std::vector<std::unique_ptr<remote_node>> links;
  std::vector<pid_t> children;
  /// The run folder's records of the local launcher's nodes (cluster/local_nodes.hpp).
  std::vector<std::string> records;
  std::vector<evaluator_actor> slots;
};

/// Starts (per the launcher) and connects every node of the hostfile. "" or why the sweep
/// cannot run (a bad hostfile, or no node answered); nodes that do not answer are logged and
/// left out. What a launcher starts gets SIGTERM when the calling thread ends: call it from the
/// thread that lives as long as the sweep.
std::string open_cluster(caf::actor_system& sys, const cluster_request& req, cluster& out);

/// Says bye to every node, stops the nodes the launcher started and removes their records.
void close_cluster(cluster& c);

} // namespace bb
