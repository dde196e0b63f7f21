#include "generate/run_folder.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "results/reports.hpp"

namespace fs = std::filesystem;

namespace bb {

namespace {

std::string timestamp() {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d_%H%M%S", std::localtime(&t));
  return buf;
}

std::string settings_text(const settings_lines& settings, const char* indent) {
  std::string out;
  for (auto& [k, v] : settings)
    out += indent + k + ": " + v + "\n";
  return out;
}

std::string readme_text(const std::string& name, const std::string& backend,
                        const settings_lines& settings, const std::string& command) {
  std::ostringstream out;
  out << "# " << name << "\n\n"
      << "Kernels written by bbcluster's `" << backend << "` backend, one folder per operator, "
      << "in BackendBench's directory layout.\n\n"
      << "## Command\n\n```\n" << command << "\n```\n\n"
      << "## Settings\n\n";
  for (auto& [k, v] : settings)
    out << "- " << k << ": " << v << "\n";
  out << "\n## Files\n\n"
      << "- `<op>/<op>_implementation_v<N>.py` (or `.cu`): version N of the operator's kernel, "
         "one per attempt; from v2 on each was written with the evaluation of the one before "
         "as feedback.\n"
      << "- `<op>/<op>_summary.txt`: the operator, its attempts with their verdicts, the final "
         "status and why.\n"
      << "- `<op>_session_<name>/`: the agent's session folder for that operator "
         "(kernel_agent backend).\n"
      << "- `agent_logs/`: what the authors printed, one log per operator and version.\n"
      << "- `OVERALL_SUMMARY.txt`: totals, success rate and settings.\n\n"
      << "The evaluation's own reports (scores, per-input results, the journal "
         "`results.jsonl`) are in the run directory that holds this folder.\n\n"
      << "## Evaluating these kernels again\n\n"
      << "```\nbbcluster --suite torchbench --data <traces> --backend directory "
         "--ops-directory "
      << name << "\n```\n\n"
      << "The directory backend evaluates the first implementation file of each folder in "
         "sorted order (BackendBench's rule): `v1` where an operator has several versions. The "
         "version that stood in this campaign is named in the operator's summary.\n";
  return out.str();
}

} // namespace

std::string run_folder::create(const std::string& parent, const std::string& backend,
                               const settings_lines& settings, const std::string& command) {
  backend_ = backend;
  settings_ = settings;
  auto name = backend + "_run_" + timestamp();
  auto base = fs::path(parent.empty() ? "." : parent) / name;
  // Two campaigns started in the same second get distinct folders.
  for (int n = 2; fs::exists(base); ++n)
    base = fs::path(parent.empty() ? "." : parent) / (name + "_" + std::to_string(n));
  std::error_code ec;
  fs::create_directories(base / "agent_logs", ec);
  if (ec)
    return "cannot create " + (base / "agent_logs").string() + ": " + ec.message();
  path_ = base.string();
  return write_file_atomically(base / "README.md",
                               readme_text(base.filename().string(), backend, settings, command));
}

std::string run_folder::reopen(const std::string& path, const std::string& backend,
                               const settings_lines& settings) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return path + " is not a folder";
  fs::create_directories(fs::path(path) / "agent_logs", ec);
  if (ec)
    return "cannot create " + path + "/agent_logs: " + ec.message();
  path_ = path;
  backend_ = backend;
  settings_ = settings;
  return "";
}

std::string run_folder::find_latest(const std::string& parent, const std::string& backend) {
  std::string latest;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(parent.empty() ? "." : parent, ec)) {
    auto name = e.path().filename().string();
    // Timestamped names sort in time order.
    if (e.is_directory() && name.rfind(backend + "_run_", 0) == 0 && e.path().string() > latest)
      latest = e.path().string();
  }
  return latest;
}

std::string run_folder::version_file(const std::string& folder, uint32_t version) const {
  for (auto kind : {kernel_kind::py, kernel_kind::cu, kernel_kind::cpp}) {
    auto file = fs::path(path_) / folder
                / (folder + "_implementation_v" + std::to_string(version) + "." + to_string(kind));
    if (fs::exists(file))
      return file.string();
  }
  return "";
}

std::vector<std::string> run_folder::sessions_of(const std::string& folder) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(path_, ec)) {
    auto name = e.path().filename().string();
    if (e.is_directory() && name.rfind(folder + "_session_", 0) == 0)
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string run_folder::write_version(const std::string& folder, uint32_t version,
                                      kernel_kind kind, const std::string& code,
                                      std::string& error) const {
  auto dir = fs::path(path_) / folder;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir.string() + ": " + ec.message();
    return "";
  }
  auto file = dir / (folder + "_implementation_v" + std::to_string(version) + "." + to_string(kind));
  error = write_file_atomically(file, code);
  return error.empty() ? file.string() : "";
}

std::string run_folder::preserve_session(const std::string& folder, const std::string& session_dir,
                                         std::string& error) const {
  auto source = fs::path(session_dir);
  while (!source.empty() && source.filename().empty())
    source = source.parent_path();
  std::error_code ec;
  if (!fs::is_directory(source, ec)) {
    error = "the agent's session folder " + session_dir + " does not exist";
    return "";
  }
  // The session's name is kept whole, as BackendBench's KernelAgent integration keeps it
  // (<folder>_session_session_<date>_<time>_<us>): tools that read run folders match on it.
  auto name = folder + "_session_" + source.filename().string();
  auto target = fs::path(path_) / name;
  if (fs::exists(target, ec)) {
    error = target.string() + " exists already";
    return "";
  }
  fs::rename(source, target, ec);
  if (ec) {
    ec.clear();
    fs::copy(source, target, fs::copy_options::recursive, ec);
    if (ec) {
      error = "cannot copy " + source.string() + " to " + target.string() + ": " + ec.message();
      return "";
    }
  }
  // The run's own folder in agent_logs/ goes when the session was all it held.
  auto parent = source.parent_path();
  if (parent.parent_path() == fs::path(agent_logs()) && fs::is_empty(parent, ec))
    fs::remove(parent, ec);
  return name;
}

std::string format_op_summary(const std::string& backend, const settings_lines& settings,
                              const op_summary& s) {
  auto op = s.op_name.rfind("aten.", 0) == 0 ? s.op_name.substr(5) : s.op_name;
  auto base = op.substr(0, op.find('.'));
  std::ostringstream out;
  out << "Operation: " << base << "\n"
      << "Full op name: " << s.op_name << "\n"
      << "Folder: " << s.folder << "\n"
      << "Backend: " << backend << "\n"
      << "Settings:\n" << settings_text(settings, "  ")
      << "Attempts: " << s.versions.size() << "\n";
  for (auto& v : s.versions) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.1f s", v.author_seconds);
    out << "  v" << v.version << ": " << (v.file.empty() ? "(no file)" : v.file) << ": "
        << v.verdict << " [written in " << secs
        << (v.author_note.empty() ? "" : "; " + v.author_note) << "]\n";
  }
  out << "Final status: " << s.status;
  if (s.final_version > 0)
    out << " (version " << s.final_version << " stands)";
  out << "\n";
  if (!s.why.empty())
    out << "Why: " << s.why << "\n";
  for (auto& session : s.sessions)
    out << "Agent session: " << session << "\n";
  return out.str();
}

std::string format_overall_summary(const std::string& backend, const settings_lines& settings,
                                   const std::vector<op_summary>& ops) {
  size_t passed = 0, failed = 0, skipped = 0, running = 0, attempts = 0, files = 0;
  for (auto& s : ops) {
    attempts += s.versions.size();
    for (auto& v : s.versions)
      files += v.file.empty() ? 0 : 1;
    if (s.status == "passed")
      ++passed;
    else if (s.status == "failed")
      ++failed;
    else if (s.status == "skipped")
      ++skipped;
    else
      ++running;
  }
  auto done = passed + failed;
  char rate[64];
  std::snprintf(rate, sizeof(rate), "%.1f%% (%zu of %zu finished, scored operators)",
                done ? 100.0 * static_cast<double>(passed) / static_cast<double>(done) : 0.0,
                passed, done);
  std::ostringstream out;
  out << "Backend: " << backend << "\n"
      << "Operators: " << ops.size() << "\n"
      << "Passed: " << passed << "\n"
      << "Failed: " << failed << "\n";
  if (skipped)
    out << "Skipped (cannot run here, left out of the scores): " << skipped << "\n";
  if (running)
    out << "In progress: " << running << "\n";
  out << "Success rate: " << rate << "\n"
      << "Attempts: " << attempts << " (" << files << " with a kernel file)\n"
      << "Settings:\n" << settings_text(settings, "  ") << "\nOperators:\n";
  for (auto& s : ops) {
    out << "  " << s.op_name << ": " << s.status;
    if (s.final_version > 0)
      out << " (v" << s.final_version << " of " << s.versions.size() << ")";
    if (!s.why.empty())
      out << ": " << s.why.substr(0, s.why.find('\n'));
    out << "\n";
  }
  return out.str();
}

std::string run_folder::write_op_summary(const op_summary& s) const {
  auto dir = fs::path(path_) / s.folder;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return "cannot create " + dir.string() + ": " + ec.message();
  return write_file_atomically(dir / (s.folder + "_summary.txt"),
                               format_op_summary(backend_, settings_, s));
}

std::string run_folder::write_overall(const std::vector<op_summary>& ops) const {
  return write_file_atomically(fs::path(path_) / "OVERALL_SUMMARY.txt",
                               format_overall_summary(backend_, settings_, ops));
}

} // namespace bb
