#pragma once

// CURVE keys for the node protocol: a coordinator keypair and a node keypair, made by
// `bbcluster keygen DIR`, stored as text (Z85, 40 characters each):
//   DIR/coordinator.key   public and secret key of the coordinator (keep private)
//   DIR/coordinator.pub   its public key (give to every node)
//   DIR/node.key          public and secret key of the nodes (copy to every node)
//   DIR/node.pub          their public key (for the coordinator)

#include <string>
#include <vector>

namespace bb {

struct curve_keypair {
  std::string public_key;
  /// Empty in a .pub file.
  std::string secret_key;
};

/// Writes the four files into `dir` (created if missing; secret files with mode 0600),
/// replacing any there. "" or what failed.
std::string generate_curve_keys(const std::string& dir);

/// The paths of the four files that `dir` already holds (keygen replaces them only when told).
std::vector<std::string> existing_curve_key_files(const std::string& dir);

/// Reads a .key or .pub file; "" or what is wrong with it (naming the file and line).
std::string read_curve_keys(const std::string& path, curve_keypair& out);

} // namespace bb
