// bbnode: the node daemon hosting one evaluator per slot. This version runs the node's
// self-check (--check): every slot starts its runner and evaluates the smoke suite's relu.
// Serving jobs over the network comes with --listen in a later version.

#include <filesystem>
#include <iostream>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/evaluator.hpp"
#include "core/config.hpp"
#include "core/scoring.hpp"
#include "core/suite.hpp"
#include "messages/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bbnode: hosts evaluators for bbcluster"};
  std::string config, listen, log_dir;
  int64_t devices = 0;
  bool check = false;
  app.add_flag("--check", check, "start every slot's runner, evaluate relu, report, exit");
  app.add_option("--listen", listen, "endpoint to serve a coordinator on (later version)");
  app.add_option("--config", config, "settings file (TOML)")->check(CLI::ExistingFile);
  app.add_option("--devices", devices, "evaluator slots")->check(CLI::PositiveNumber);
  app.add_option("--log-dir", log_dir, "folder for runner logs (default: a temporary folder)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbnode: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (!check) {
    std::cerr << "bbnode: serving a coordinator (--listen) is not available in this version; "
                 "use --check\n";
    return 3;
  }
  bb::settings s;
  if (!config.empty())
    if (auto err = bb::load_settings(config, s)) {
      std::cerr << "bbnode: " << bb::describe(err) << "\n";
      return 2;
    }
  if (devices > 0)
    s.devices = devices;
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbnode"));
  spdlog::set_level(spdlog::level::from_str(s.log_level));
  bool temporary = log_dir.empty();
  if (temporary) {
    char tmpl[] = "/tmp/bbnode-XXXXXX";
    log_dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  char host[256] = "local";
  ::gethostname(host, sizeof(host) - 1);

  int failures = 0;
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::bb>();
    caf::actor_system sys{cfg};
    bb::evaluator_config ecfg;
    ecfg.runner = s.runner.empty() ? bb::default_runner_path() : s.runner;
    ecfg.node = host;
    ecfg.log_dir = log_dir;
    ecfg.start_timeout_s = s.start_timeout_s;
    ecfg.job_timeout_s = s.job_timeout_s;
    ecfg.cpu_warmup = 1;
    ecfg.cpu_runs = 1;
    auto evaluators = bb::spawn_evaluators(sys, ecfg, static_cast<size_t>(std::max<int64_t>(1, s.devices)));
    auto smoke = bb::smoke_suite().ops.front();
    caf::scoped_actor self{sys};
    for (size_t slot = 0; slot < evaluators.size(); ++slot) {
      bb::eval_job job;
      job.job_id = slot + 1;
      job.attempt = 1;
      job.op_name = smoke.op_name;
      job.kernel = {"aten", "", "", "aten"};
      job.correctness_inputs = smoke.correctness;
      self->request(evaluators[slot], std::chrono::seconds(120), bb::atom::evaluate_v, job)
        .receive(
          [&](bb::eval_result& r) {
            auto score = bb::score_op(r.op_name, r.correctness, r.performance);
            bool ok = r.outcome == "ok" && score.correct;
            failures += ok ? 0 : 1;
            std::cout << "slot " << slot << ": " << (ok ? "ok" : "FAILED") << " (" << r.where.device
                      << ", torch " << r.where.torch_version << ")"
                      << (ok ? "" : ": " + r.outcome + " " + r.detail) << "\n";
          },
          [&](caf::error& err) {
            ++failures;
            std::cout << "slot " << slot << ": FAILED: " << bb::describe(err) << "\n";
          });
      self->send_exit(evaluators[slot], caf::exit_reason::user_shutdown);
    }
  }
  if (temporary) {
    std::error_code ec;
    std::filesystem::remove_all(log_dir, ec);
  }
  return failures == 0 ? 0 : 1;
}
