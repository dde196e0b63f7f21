#pragma once

// bbnode's parts: its flags, the checks before it starts, and its two modes: --check (every
// slot evaluates relu once) and --listen (serve coordinators over ZeroMQ until SIGTERM or
// SIGINT). Wiring only.

#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>
#include <CLI/CLI.hpp>

#include "cluster/config.hpp"
#include "cluster/curve_keys.hpp"
#include "nodes/local_node.hpp"

namespace bb {

struct node_options {
  std::string config, listen, log_dir, name, endpoint_file, keys;
  int64_t devices = 0;
  double silence_s = 30;
  bool check = false;
};

void add_node_flags(CLI::App& app, node_options& o);

/// What bbnode runs with, read from its options.
struct node_setup {
  settings s;
  curve_keypair node_keys;
  curve_keypair coordinator_key;
  /// The log folder is a temporary one, removed at the end.
  bool temporary_logs = false;
};

/// Checks the options (a mode; no open port without keys), reads the keys and settings, and
/// fills in the name and log folder; "" or why bbnode cannot start.
std::string prepare_node(node_options& o, node_setup& out);

/// --check: every slot evaluates relu once; 0 when all passed.
int check_slots(caf::actor_system& sys, const local_node& node);

/// --listen: serves coordinators until SIGTERM or SIGINT; 0, or 1 when it cannot serve.
int serve_coordinators(caf::actor_system& sys, const local_node& node, const node_options& o,
                       const node_setup& setup);

} // namespace bb
