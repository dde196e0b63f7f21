#pragma once

// The nodes of a cluster in DeepSpeed's hostfile format: one `hostname slots=N` a line, `#`
// comments, blank lines ignored. A port may follow the host (`worker-1:29500`,
// `[fe80::1]:29500`). Bad lines are reported with origin and line and left out, and so is a
// line naming a node an earlier line names (the same host, case aside, on the same port, a host
// without a port being on the default port).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bb {

/// One good line of a hostfile.
struct host_entry {
  /// A host name, an IPv4 address, or an IPv6 address without its brackets.
  std::string host;
  /// 0: the default port.
  uint16_t port = 0;
  /// Evaluator slots (GPUs) on the host, at least 1.
  uint32_t slots = 0;
  /// The 1-based line the entry was read from.
  size_t line = 0;
};

/// The good lines of a hostfile, in file order, and an error per bad line.
struct hostfile {
  std::vector<host_entry> hosts;
  /// "origin:line: what was wrong", one per line left out.
  std::vector<std::string> errors;
};

/// Parses hostfile text read from a file named `origin`; a host without a port is on
/// `default_port` (nodes.port). A file with no host line is no error here; the caller decides
/// whether an empty cluster is one.
hostfile parse_hostfile(const std::string& text, const std::string& origin, uint16_t default_port);

/// Reads and parses the hostfile at `path`; a missing or unreadable file is one error naming
/// it, and no hosts.
hostfile load_hostfile(const std::string& path, uint16_t default_port);

/// A name per entry, each different from the others (what a node is called in logs and the
/// local launcher's file names): the host, or `host-port` where another entry has the same
/// host on another port.
std::vector<std::string> node_names(const std::vector<host_entry>& hosts, uint16_t default_port);

} // namespace bb
