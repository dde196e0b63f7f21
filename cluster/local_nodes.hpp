#pragma once

// The bbnodes the local launcher starts, as their run folder records them: `<name>.pid` beside
// `<name>.endpoint` in the folder's `nodes/`, holding the node's pid and start time and those
// of the coordinator that started it. A node gets SIGTERM when its coordinator dies
// (nodes/cluster.cpp); one that outlived it all the same (a coordinator of an older bbcluster,
// a node that ignored the signal) is ended by the next sweep on the folder, --resume or a
// fresh one. No actors here.

#include <string>
#include <vector>

#include <sys/types.h>

namespace bb {

/// Where the record of node `name` lives in `nodes_dir`.
std::string local_node_record_path(const std::string& nodes_dir, const std::string& name);

/// Writes the record of the bbnode `node` that this process has just started as `name`;
/// "" or why not.
std::string record_local_node(const std::string& nodes_dir, const std::string& name, pid_t node);

/// A recorded bbnode still running although the coordinator that started it is gone.
struct left_node {
  std::string name;
  pid_t pid = 0;
  pid_t coordinator = 0;
};

/// The recorded bbnodes of `nodes_dir` left by a coordinator that is gone: each is the very
/// process recorded (its pid and start time), runs bbnode, and serves this folder (its
/// --endpoint-file is in `nodes_dir`), and the process that started it is no longer running.
std::vector<left_node> find_left_nodes(const std::string& nodes_dir);

/// Ends the nodes find_left_nodes names (SIGTERM, SIGKILL after `grace_s`) and removes the
/// records of every recorded node that no longer runs. Returns the nodes it ended.
std::vector<left_node> end_left_nodes(const std::string& nodes_dir, double grace_s);

} // namespace bb
