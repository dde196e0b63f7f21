// --backend flag_gems: FlagGems' kernels as the implementation of every operator it
// registers. python/bbcluster_flag_gems.py writes one Python kernel per covered operator in
// BackendBench's directory layout; the sweep then runs as --backend directory on them.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "artefacts/sha256.hpp"
#include "programs/cli.hpp"
#include "process/subprocess.hpp"

namespace bb::program {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

std::string attach_flag_gems(flags& f, const settings& s, const sweep_plan& plan) {
  if (f.backend != "flag_gems")
    return "";
  bool local_slots = !runs_on_nodes(f);
  if (local_slots && count_gpus() == 0 && !f.list)
    return "--backend flag_gems runs FlagGems' Triton kernels, which need a CUDA device; this "
           "machine has no GPU, so its evaluator slots are CPU slots. Run it on a GPU machine or "
           "with --nodes of GPU nodes (--list shows the operators FlagGems covers without one)";
  std::string names;
  for (auto& op : plan.work.ops)
    names += op.op_name + "\n";
  auto dir = project_home() + "/flag_gems/" + sha256_hex(names).substr(0, 16);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return "--backend flag_gems: cannot make " + dir + ": " + ec.message();
  auto ops_file = dir + "/operators.txt";
  std::ofstream(ops_file) << names;
  auto log = dir + "/generate.log";
  auto python = s.ka_python.empty() ? build_python() : s.ka_python;
  fs::remove(log, ec);
  auto run = run_process({python, beside_program("bbcluster_flag_gems.py"), dir, ops_file}, log, 300);
  if (!run.ok()) {
    auto text = read_text(log);
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    return "--backend flag_gems: cannot write FlagGems' kernels (" + run.how + "): "
           + text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  }
  nlohmann::json coverage;
  try {
    coverage = nlohmann::json::parse(read_text(dir + "/coverage.json"));
  } catch (const nlohmann::json::exception& e) {
    return "--backend flag_gems: " + dir + "/coverage.json: " + e.what();
  }
  auto version = coverage.value("version", "?");
  auto lacking = coverage.value("lacking", nlohmann::json::array());
  std::string skipped;
  for (auto& entry : lacking) {
    auto op = entry.get<std::string>();
    skipped += (skipped.empty() ? "" : ", ") + op;
    f.not_evaluated[op] = "FlagGems " + version + " lacks it";
  }
  spdlog::info("bbcluster: FlagGems {} implements {} of the {} selected operators; kernels in {}",
               version, coverage.value("covered", nlohmann::json::array()).size(), plan.work.ops.size(), dir);
  if (!lacking.empty())
    spdlog::info("bbcluster: skipped, FlagGems lacks them: {}", skipped);
  f.backend = "directory";
  f.ops_directory = dir;
  return "";
}

} // namespace bb::program
