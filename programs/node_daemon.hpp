#pragma once

// bbnode's parts: its flags, the checks before it starts, and its two modes: --check (every
// slot evaluates relu once) and --listen (serve coordinators over ZeroMQ until SIGTERM or
// SIGINT). Wiring only.

#include <cstdint>
#include <map>
#include <string>

#include <caf/actor_system.hpp>
#include <CLI/CLI.hpp>

#include "cluster/config.hpp"
#include "cluster/curve_keys.hpp"
#include "programs/local_node.hpp"

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

/// --listen: serves coordinators until SIGTERM or SIGINT; 0, or 1 when it cannot serve. Each
/// coordinator's sweep settings are applied at its hello (apply_session_settings); `node` is
/// then the node rebuilt with them.
int serve_coordinators(caf::actor_system& sys, local_node& node, const node_options& o,
                       const node_setup& setup);

/// A coordinator's sweep settings (`sent`) over the node's own (`own`, its --config):
/// `current` becomes them, and `node` is rebuilt when they change what a runner's or
/// compiler's start fixes (timeouts, sandbox, memory and compile limits; the timer and the
/// checks travel with each job). `applied` is what the node then evaluates with; "" or why it
/// cannot: a bad value, a sandbox lowered below the node's own "required" or one this machine
/// cannot make, or (starting with busy_refusal) slots to rebuild while `jobs_in_flight` of an
/// earlier session still run on them.
std::string apply_session_settings(caf::actor_system& sys, const node_options& o,
                                   const settings& own, const std::map<std::string, std::string>& sent,
                                   size_t jobs_in_flight, settings& current, local_node& node,
                                   std::map<std::string, std::string>& applied);

} // namespace bb
