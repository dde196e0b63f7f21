#pragma once

// BackendBench's directory layout of kernels: <dir>/<folder>/<folder>_implementation*.{py,cpp,cu},
// folder = op name with "." replaced by "__". The first file in sorted order is the one used.

#include <optional>
#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

struct directory_kernel {
  /// Full operator name: aten.add.Tensor.
  std::string op_name;
  std::string folder;
  artefact kernel;
};

struct kernel_dir_scan {
  std::vector<directory_kernel> kernels;
  /// "path: reason" for every folder or file that cannot be used; the rest still runs.
  std::vector<std::string> problems;
  /// Why nothing can be read (no such folder).
  std::string fatal;
};

/// Reads every operator folder of `dir`: the first implementation file, its source, hash and
/// entry point. A folder without an implementation file, or a file without its entry point
/// (`<folder>_kernel_impl`), is a problem, not a kernel.
kernel_dir_scan scan_kernel_dir(const std::string& dir);

/// A kernel of `kind` (py, cpp or cu) from its source, with its hash: "" or why it cannot run
/// (no function or export named `entry`). `path` names where it came from, for reports.
std::string kernel_artefact(kernel_kind kind, std::string source, const std::string& entry,
                            const std::string& path, artefact& out);

/// Reads one implementation file as an artefact; "" or why not (missing entry point, ...).
std::string read_kernel_file(const std::string& path, const std::string& folder, artefact& out);

/// The kind of a kernel file by its extension (py, cpp or cu); nullopt for another file.
std::optional<kernel_kind> kernel_kind_of(const std::string& filename);

} // namespace bb
