#pragma once

// The evaluators and compile pool of one node, made from settings: hosted by bbnode, or by
// bbcluster itself when it runs without --nodes. Wiring only.

#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "cluster/config.hpp"
#include "messages/types.hpp"
#include "messages/wire.hpp"
#include "process/sandbox.hpp"

namespace bb {

struct local_node {
  std::vector<evaluator_actor> evaluators;
  compile_pool_actor compiler;
  node_info info;
};

/// Spawns a node's evaluators (one per GPU, or settings.devices CPU slots) and its compile
/// pool, logging under `log_dir`.
local_node spawn_local_node(caf::actor_system& sys, const settings& s, const std::string& name,
                            const std::string& log_dir);

/// The JIT cache's store of this node (evaluator.jit_cache): $BBCLUSTER_HOME/jit.
std::string jit_cache_dir();

/// The sandbox of a node's runners and compilers (evaluator.sandbox): the home, the run
/// folder, the kernel cache and the CURVE keys hidden; the Python environment, the runner's
/// folder, the cache's built objects and the JIT cache's store read-only.
sandbox_policy node_sandbox(const settings& s, const std::string& run_folder,
                            const std::string& cache_dir, const std::string& runner);

/// Why this node must not start under evaluator.sandbox = "required" (bwrap cannot make
/// namespaces here); "" when it may.
std::string sandbox_refusal(const settings& s);

/// Stops what spawn_local_node started.
void stop_local_node(caf::actor_system& sys, local_node& node);

/// Whether a ZeroMQ endpoint binds only the loopback interface (tcp://127.x, localhost, [::1],
/// or ipc/inproc).
bool is_loopback_endpoint(const std::string& endpoint);

} // namespace bb
