#include "artefacts/kernel_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "suite/ops.hpp"
#include "artefacts/sha256.hpp"

namespace bb {

namespace fs = std::filesystem;

std::optional<kernel_kind> kernel_kind_of(const std::string& filename) {
  return kernel_kind_of_extension(fs::path(filename).extension().string());
}

namespace {

// Whether the source defines the entry point: a Python function (or a name bound to one), or
// a C++ function exported with BBCLUSTER_EXPORT_KERNEL.
bool has_entry_point(kernel_kind kind, const std::string& source, const std::string& entry) {
  if (kind == kernel_kind::py) {
    std::regex def("(^|\\n)\\s*(async\\s+)?def\\s+" + entry + "\\s*\\(|(^|\\n)" + entry + "\\s*=");
    return std::regex_search(source, def);
  }
  std::regex exported("BBCLUSTER_EXPORT_KERNEL\\s*\\(\\s*" + entry + "\\s*\\)");
  return std::regex_search(source, exported);
}

} // namespace

std::string kernel_artefact(kernel_kind kind, std::string source, const std::string& entry,
                            const std::string& path, artefact& out) {
  out.kind = kind;
  out.path = path;
  out.source = std::move(source);
  out.hash = sha256_hex(out.source);
  out.entry = entry;
  // A name, not a pattern: the entry point is looked for with a regular expression.
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*");
  if (!std::regex_match(out.entry, identifier))
    return "the entry point '" + out.entry.substr(0, 80) + "' is not a name (letters, digits and '_')";
  if (!has_entry_point(out.kind, out.source, out.entry))
    return out.kind == kernel_kind::py ? "no function named " + out.entry + " (the entry point)"
                            : "no BBCLUSTER_EXPORT_KERNEL(" + out.entry + ") (the entry point)";
  return "";
}

std::string read_kernel_file(const std::string& path, const std::string& folder, artefact& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return "cannot read the file";
  std::stringstream ss;
  ss << in.rdbuf();
  return kernel_artefact(kernel_kind_of(path).value_or(kernel_kind::none), ss.str(), folder + "_kernel_impl",
                         path, out);
}

kernel_dir_scan scan_kernel_dir(const std::string& dir) {
  kernel_dir_scan scan;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    scan.fatal = "--ops-directory " + dir + ": no such folder";
    return scan;
  }
  std::vector<fs::path> folders;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory())
      folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  for (auto& folder_path : folders) {
    auto folder = folder_path.filename().string();
    if (folder.empty() || folder[0] == '.' || folder == "__pycache__")
      continue;
    // A generative campaign's run folder holds its agents' logs and sessions beside the
    // operator folders.
    if (folder == "agent_logs" || folder.find("_session_") != std::string::npos)
      continue;
    std::vector<std::string> files;
    for (auto& f : fs::directory_iterator(folder_path, ec)) {
      auto name = f.path().filename().string();
      if (f.is_regular_file() && kernel_kind_of(name)
          && name.rfind(folder + "_implementation", 0) == 0)
        files.push_back(name);
    }
    if (files.empty()) {
      scan.problems.push_back(folder_path.string() + ": no implementation file (expected "
                              + folder + "_implementation_v<N>.{py,cpp,cu})");
      continue;
    }
    // BackendBench takes the first in plain sorted order.
    std::sort(files.begin(), files.end());
    directory_kernel k;
    k.folder = folder;
    k.op_name = ops::folder_name_to_aten_name(folder);
    auto path = (folder_path / files.front()).string();
    if (auto why = read_kernel_file(path, folder, k.kernel); !why.empty()) {
      scan.problems.push_back(path + ": " + why);
      continue;
    }
    scan.kernels.push_back(std::move(k));
  }
  return scan;
}

} // namespace bb
