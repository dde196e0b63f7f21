// bbcluster: the coordinator process of a sweep. Parses the command line (BackendBench's
// flags plus ours), loads settings, spawns reporter, generator, evaluators and coordinator,
// runs the sweep and prints BackendBench's three scores.

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/aten_generator.hpp"
#include "actors/coordinator.hpp"
#include "actors/evaluator.hpp"
#include "actors/reporter.hpp"
#include "core/config.hpp"
#include "core/ops.hpp"
#include "core/plan.hpp"
#include "core/runner_process.hpp"
#include "messages/errors.hpp"

namespace {

struct flags {
  std::string suite = "smoke", backend = "aten", ops, llm_model, ops_directory, log_dir;
  std::string data, nodes, config, resume, log_level;
  int64_t topn = 0, llm_attempts = 5, ka_workers = 4, ka_max_rounds = 10, devices = 0;
  double p = 1.0;
  bool disable_output_logs = false;
  bool list = false;
};

void add_flags(CLI::App& app, flags& f) {
  app.add_option("--suite", f.suite, "suite to run")->check(CLI::IsMember({"smoke", "torchbench"}));
  app.add_option("--backend", f.backend, "where kernels come from")
    ->check(CLI::IsMember({"aten", "directory", "llm", "kernel_agent"}));
  app.add_option("--ops", f.ops, "comma-separated operators (full name, without aten., or base name)");
  app.add_option("--topn-inputs,--topn", f.topn, "keep the N largest inputs per operator")
    ->check(CLI::NonNegativeNumber);
  app.add_option("--llm-attempts", f.llm_attempts, "attempts per operator (llm backend)");
  app.add_option("--llm-model", f.llm_model, "model name (llm backend)");
  app.add_option("--kernel-agent-workers", f.ka_workers, "KernelAgent workers");
  app.add_option("--kernel-agent-max-rounds", f.ka_max_rounds, "KernelAgent rounds per worker");
  app.add_option("--ops-directory", f.ops_directory, "kernel folder (directory backend)");
  app.add_option("--log-dir", f.log_dir, "run folder (default backendbench_output_<timestamp>)");
  app.add_flag("--disable-output-logs", f.disable_output_logs, "write no report files");
  app.add_option("--p", f.p, "perf@p threshold")->check(CLI::PositiveNumber);
  app.add_option("--log-level", f.log_level, "DEBUG, INFO, WARNING or ERROR")
    ->transform(CLI::IsMember({"debug", "info", "warning", "error", "trace", "critical", "off"},
                              CLI::ignore_case));
  app.add_option("--data", f.data, "torchbench inputs: trace file, folder of traces, or .jsonl");
  app.add_option("--nodes", f.nodes, "hosts.txt (DeepSpeed hostfile format)");
  app.add_option("--config", f.config, "settings file (TOML), see configs/default.toml")
    ->check(CLI::ExistingFile);
  app.add_option("--resume", f.resume, "run folder of an interrupted sweep");
  app.add_option("--devices", f.devices, "evaluator slots (CPU slots on a machine without GPUs)")
    ->check(CLI::PositiveNumber);
  app.add_flag("--list", f.list, "print the selected operators with their input counts and exit");
}

// Features that come in later versions fail loudly instead of being ignored.
std::string unavailable(const flags& f) {
  if (f.backend != "aten")
    return "--backend " + f.backend + " is not available in this version (only aten)";
  if (!f.nodes.empty())
    return "--nodes is not available in this version (sweeps run on the local node)";
  if (!f.resume.empty())
    return "--resume is not available in this version";
  return "";
}

// Tells what loading found: bad lines, operators skipped before evaluation, unmatched --ops.
void report_plan(const bb::sweep_plan& plan) {
  for (auto& e : plan.input_errors)
    spdlog::error("bbcluster: {} (line left out)", e);
  for (auto& w : plan.warnings)
    spdlog::warn("bbcluster: {}", w);
  if (!plan.skipped_ops.empty()) {
    spdlog::info("bbcluster: {} operators skipped as BackendBench's torchbench suite skips them",
                 plan.skipped_ops.size());
    for (auto& s : plan.skipped_ops)
      spdlog::debug("bbcluster: skipped {}", s);
  }
  if (plan.lines > 0)
    spdlog::info("bbcluster: {} input lines read, {} operators selected{}", plan.lines,
                 plan.work.ops.size(),
                 plan.excluded_rows ? ", " + std::to_string(plan.excluded_rows)
                                        + " rows not included_in_benchmark"
                                    : std::string());
}

// --list: resolves the selected operators in a runner's dispatcher and prints them.
int list_ops(const bb::suite& work, const bb::settings& s) {
  char tmpl[] = "/tmp/bbcluster-list-XXXXXX";
  std::string scratch = ::mkdtemp(tmpl) ? tmpl : "/tmp";
  bb::runner_process runner;
  bb::runner_spec spec;
  spec.program = s.runner.empty() ? bb::default_runner_path() : s.runner;
  spec.log_path = scratch + "/runner.log";
  auto err = runner.start(spec, static_cast<int>(s.start_timeout_s * 1000));
  std::optional<std::vector<std::string>> schemas;
  if (err.empty()) {
    std::vector<std::string> names;
    for (auto& op : work.ops)
      names.push_back(op.op_name);
    schemas = runner.resolve(names, 60000, err);
    runner.stop();
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  if (!schemas) {
    std::cerr << "bbcluster: cannot resolve operators: " << err << "\n";
    return 1;
  }
  std::cout << bb::format_op_list(work, *schemas) << std::flush;
  return 0;
}

std::string timestamped_dir() {
  auto t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "backendbench_output_%Y%m%d_%H%M%S", std::localtime(&t));
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"bbcluster: evaluates generated PyTorch operator kernels, BackendBench-compatible"};
  flags f;
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbcluster: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (auto why = unavailable(f); !why.empty()) {
    std::cerr << "bbcluster: " << why << "\n";
    return 3;
  }
  bb::settings s;
  if (!f.config.empty())
    if (auto err = bb::load_settings(f.config, s)) {
      std::cerr << "bbcluster: " << bb::describe(err) << "\n";
      return 2;
    }
  if (!f.log_dir.empty())
    s.log_dir = f.log_dir;
  if (app.count("--p"))
    s.p = f.p;
  if (f.devices > 0)
    s.devices = f.devices;
  if (!f.log_level.empty())
    s.log_level = f.log_level == "warning" ? "warn" : f.log_level;
  if (auto err = bb::validate(s)) {
    std::cerr << "bbcluster: " << bb::describe(err) << "\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbcluster"));
  spdlog::set_level(spdlog::level::from_str(s.log_level));

  auto plan = bb::make_plan({f.suite, f.data, bb::ops::split_tokens(f.ops), static_cast<size_t>(f.topn)});
  if (!plan.fatal.empty()) {
    std::cerr << "bbcluster: " << plan.fatal << "\n";
    return 2;
  }
  report_plan(plan);
  if (f.list)
    return list_ops(plan.work, s);
  std::string run_dir = f.disable_output_logs ? "" : (s.log_dir.empty() ? timestamped_dir() : s.log_dir);
  std::string scratch = run_dir;
  if (run_dir.empty()) {
    char tmpl[] = "/tmp/bbcluster-XXXXXX";
    scratch = mkdtemp(tmpl) ? tmpl : "/tmp";
  }

  int rc = 0;
  {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  std::string command = "bbcluster";
  for (int i = 1; i < argc; ++i)
    command += std::string(" ") + argv[i];
  auto reporter = sys.spawn(bb::reporter, bb::reporter_config{run_dir, command, s.p,
                                                              plan.work.ops.size()});
  auto generator = sys.spawn(bb::aten_generator);
  bb::evaluator_config ecfg;
  ecfg.runner = s.runner.empty() ? bb::default_runner_path() : s.runner;
  ecfg.log_dir = scratch + "/runner_logs";
  ecfg.job_timeout_s = s.job_timeout_s;
  ecfg.start_timeout_s = s.start_timeout_s;
  ecfg.cpu_warmup = s.cpu_warmup;
  ecfg.cpu_runs = s.cpu_runs;
  ecfg.cpu_max_seconds = s.cpu_max_seconds;
  auto evaluators = bb::spawn_evaluators(sys, ecfg, static_cast<size_t>(std::max<int64_t>(1, s.devices)));
  bb::coordinator_config ccfg;
  ccfg.work = plan.work;
  ccfg.max_attempts = static_cast<uint32_t>(s.max_attempts);
  ccfg.evaluate_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(s.start_timeout_s + 2 * s.job_timeout_s + 30));
  auto coordinator = sys.spawn(bb::coordinator, ccfg, generator, evaluators, reporter);

  caf::scoped_actor self{sys};
  self->request(coordinator, caf::infinite, bb::atom::run_v)
    .receive(
      [&](bb::sweep_report& report) {
        std::cout << report.scores_text << std::flush;
        if (report.failed_jobs > 0)
          spdlog::warn("bbcluster: {} of {} jobs failed outside the kernel's verdict (see "
                       "failed_tests.json)", report.failed_jobs, report.jobs);
        if (!report.log_dir.empty())
          spdlog::info("bbcluster: reports in {}", std::filesystem::absolute(report.log_dir).string());
      },
      [&](caf::error& err) {
        spdlog::error("bbcluster: sweep failed: {}", bb::describe(err));
        rc = 1;
      });
  for (auto& e : evaluators)
    self->send_exit(e, caf::exit_reason::user_shutdown);
  self->send_exit(coordinator, caf::exit_reason::user_shutdown);
  self->send_exit(generator, caf::exit_reason::user_shutdown);
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
  }
  // The actor system is gone: no runner writes its log any more.
  if (run_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  return rc;
}
