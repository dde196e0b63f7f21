#pragma once

// bbcluster's command line and what it prints before a sweep: flags, settings from TOML with
// flags on top, the plan's messages, and the runner-backed lookups (--list, directory
// kernels). Configuration only: nothing here a test would want to reach past the programs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/config.hpp"
#include "core/kernel_dir.hpp"
#include "core/plan.hpp"
#include "actors/generative_generator.hpp"
#include "core/kernel_agent.hpp"
#include "core/llm_client.hpp"
#include "messages/types.hpp"

namespace caf {
class actor_system;
}

namespace bb::cli {

struct flags {
  std::string suite = "smoke", backend = "aten", ops, llm_model, ops_directory, log_dir;
  std::string data, nodes, config, resume, log_level, launcher = "none";
  std::string llm_provider, llm_base_url, llm_dsl, ka_python;
  int64_t topn = 0, llm_attempts = 5, ka_workers = 4, ka_max_rounds = 10, devices = 0;
  double p = 1.0;
  bool disable_output_logs = false;
  bool list = false;
};

void add_flags(CLI::App& app, flags& f);

/// Features of later versions fail loudly instead of being ignored; "" when all is available.
std::string unavailable(const flags& f);

/// Settings from --config with the flags on top; "" or the error.
std::string merge_settings(const CLI::App& app, const flags& f, settings& s);

/// Logs what loading found: bad lines, skipped operators, unmatched --ops.
void report_plan(const sweep_plan& plan);

/// Looks operator names up in a runner's dispatcher: one schema per name, "" for unknown.
std::optional<std::vector<std::string>> resolve_ops(const std::vector<std::string>& names,
                                                    const settings& s, std::string& error);

/// The directory backend: reads the kernels, reports unusable folders and unknown operators,
/// and keeps the suite's operators that have a kernel. "" or a fatal error.
std::string attach_directory(const std::string& dir, const settings& s, sweep_plan& plan,
                             std::vector<directory_kernel>& kernels);

/// The command line as one string, for reports.
std::string command_line(int argc, char** argv);

/// backendbench_output_<timestamp>
std::string timestamped_dir();

/// What the llm and kernel_agent backends are made of before any actor runs.
struct generative_plan {
  generative_config generator;
  llm_config llm;
  kernel_agent_config agent;
  std::string backend;
  int64_t authors = 1;
};

/// Checks what the backend needs (a model, libcurl, KernelAgent importable), looks up the
/// operators' schemas and makes the run folder; "" or a fatal error for the user.
std::string prepare_generative(const flags& f, const settings& s, const sweep_plan& plan,
                               const std::string& run_dir, const std::string& command,
                               generative_plan& out);

/// The generative backend's actors: its authors (detached) and the generator.
struct generative_backend {
  std::string run_folder;
  std::vector<author_actor> authors;
  generator_actor generator;
};

generative_backend spawn_generative(caf::actor_system& sys, const generative_plan& plan);

} // namespace bb::cli
