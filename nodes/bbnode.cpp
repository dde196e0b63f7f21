// bbnode: the node daemon hosting one evaluator per slot (one per GPU) and a compile pool.
// --listen ENDPOINT serves coordinators over ZeroMQ until SIGTERM or SIGINT; --check has every
// slot evaluate the smoke suite's relu and exits.

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/node_server.hpp"
#include "cluster/config.hpp"
#include "cluster/curve_keys.hpp"
#include "results/scoring.hpp"
#include "suite/suite.hpp"
#include "messages/errors.hpp"
#include "nodes/local_node.hpp"

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void on_stop_signal(int) {
  stop_requested = true;
}

// --check: every slot evaluates relu once.
int check_slots(caf::actor_system& sys, bb::local_node& node) {
  auto smoke = bb::smoke_suite().ops.front();
  caf::scoped_actor self{sys};
  int failures = 0;
  for (size_t slot = 0; slot < node.evaluators.size(); ++slot) {
    bb::eval_job job;
    job.job_id = slot + 1;
    job.attempt = 1;
    job.op_name = smoke.op_name;
    job.kernel = {"aten", "", "", "aten", "", ""};
    job.correctness_inputs = smoke.correctness;
    self->request(node.evaluators[slot], std::chrono::seconds(120), bb::atom::evaluate_v, job)
      .receive(
        [&](bb::eval_result& r) {
          auto score = bb::score_op(r.op_name, r.correctness, r.performance);
          bool ok = r.outcome == bb::outcome::ok && score.correct;
          failures += ok ? 0 : 1;
          std::cout << "slot " << slot << ": " << (ok ? "ok" : "FAILED") << " (" << r.where.device
                    << ", torch " << r.where.torch_version << ")"
                    << (ok ? std::string() : ": " + std::string(bb::to_string(r.outcome)) + " " + r.detail) << "\n";
        },
        [&](caf::error& err) {
          ++failures;
          std::cout << "slot " << slot << ": FAILED: " << bb::describe(err) << "\n";
        });
  }
  return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"bbnode: hosts evaluators for bbcluster"};
  std::string config, listen, log_dir, name, endpoint_file, keys;
  int64_t devices = 0;
  double silence_s = 30;
  bool check = false;
  app.add_flag("--check", check, "start every slot's runner, evaluate relu, report, exit");
  app.add_option("--listen", listen, "ZeroMQ endpoint to serve coordinators on, e.g. tcp://127.0.0.1:5555");
  app.add_option("--name", name, "node name in reports (default: the host name)");
  app.add_option("--endpoint-file", endpoint_file, "write the bound endpoint here once listening");
  app.add_option("--coordinator-silence", silence_s, "seconds without a coordinator's word before it is forgotten");
  app.add_option("--keys", keys, "folder of `bbcluster keygen`: encrypt, and accept only the coordinator's key");
  app.add_option("--config", config, "settings file (TOML)")->check(CLI::ExistingFile);
  app.add_option("--devices", devices, "evaluator slots")->check(CLI::PositiveNumber);
  app.add_option("--log-dir", log_dir, "folder for runner and compile logs (default: a temporary folder)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbnode: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (check && !listen.empty()) {
    std::cerr << "bbnode: --check and --listen exclude each other\n";
    return 2;
  }
  if (!check && listen.empty()) {
    std::cerr << "bbnode: give --listen ENDPOINT (serve a coordinator) or --check\n";
    return 2;
  }
  // A bbnode runs whatever code it is sent: an open port is remote code execution.
  if (!listen.empty() && keys.empty() && !bb::is_loopback_endpoint(listen)) {
    std::cerr << "bbnode: refusing to listen on " << listen
              << " without CURVE keys: make them with `bbcluster keygen DIR` and start bbnode "
                 "with --keys DIR (or listen on tcp://127.0.0.1:PORT)\n";
    return 2;
  }
  bb::curve_keypair node_keys, coordinator_key;
  if (!keys.empty())
    for (auto err : {bb::read_curve_keys(keys + "/node.key", node_keys),
                     bb::read_curve_keys(keys + "/coordinator.pub", coordinator_key)})
      if (!err.empty()) {
        std::cerr << "bbnode: " << err << "\n";
        return 2;
      }
  bb::settings s;
  if (!config.empty())
    if (auto err = bb::load_settings(config, s)) {
      std::cerr << "bbnode: " << bb::describe(err) << "\n";
      return 2;
    }
  if (devices > 0)
    s.devices = devices;
  // The node's keys are hidden from its runners and compilers with the coordinator's.
  if (!keys.empty())
    s.node_keys = keys;
  if (auto err = bb::validate(s)) {
    std::cerr << "bbnode: " << bb::describe(err) << "\n";
    return 2;
  }
  if (check) {
    bb::sandbox_mode mode = bb::sandbox_mode::automatic;
    bb::from_string(s.sandbox, mode);
    auto how = bb::decide_sandbox(mode);
    std::cout << "sandbox (evaluator.sandbox = " << s.sandbox << "): "
              << (how.wrap ? "works: runners and compilers run in namespaces"
                  : mode == bb::sandbox_mode::off ? "off"
                  : "DOES NOT WORK here: " + bb::sandbox_unavailable()
                      + (how.refusal.empty() ? " (runners run without one)" : ""))
              << "\n";
  }
  if (auto refusal = bb::sandbox_refusal(s); !refusal.empty()) {
    std::cerr << "bbnode: " << refusal << "\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbnode"));
  spdlog::set_level(spdlog::level::from_str(s.log_level));
  bool temporary = log_dir.empty();
  if (temporary) {
    char tmpl[] = "/tmp/bbnode-XXXXXX";
    log_dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  if (name.empty()) {
    char host[256] = "local";
    ::gethostname(host, sizeof(host) - 1);
    name = host;
  }

  int rc = 0;
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::bb>();
    caf::actor_system sys{cfg};
    auto node = bb::spawn_local_node(sys, s, name, log_dir);
    if (check) {
      rc = check_slots(sys, node);
    } else {
      std::signal(SIGTERM, on_stop_signal);
      std::signal(SIGINT, on_stop_signal);
      bb::node_server_config ncfg;
      ncfg.endpoint = listen;
      ncfg.info = node.info;
      ncfg.coordinator_silence_s = silence_s;
      ncfg.public_key = node_keys.public_key;
      ncfg.secret_key = node_keys.secret_key;
      ncfg.coordinator_key = coordinator_key.public_key;
      ncfg.evaluate_timeout_s = evaluate_timeout_s(s);
      // Tell whoever started us where we listen, once bound.
      ncfg.on_bound = [&](const std::string& endpoint) {
        std::cout << "bbnode: listening on " << endpoint << std::endl;
        if (!endpoint_file.empty()) {
          std::ofstream(endpoint_file + ".tmp") << endpoint << "\n";
          std::filesystem::rename(endpoint_file + ".tmp", endpoint_file);
        }
      };
      bb::node_server server(sys, ncfg, node.evaluators, node.compiler);
      std::thread watcher([&] {
        while (!stop_requested)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        server.stop();
      });
      auto err = server.run();
      stop_requested = true;
      watcher.join();
      if (!err.empty()) {
        std::cerr << "bbnode: " << err << "\n";
        rc = 1;
      }
    }
    bb::stop_local_node(sys, node);
  }
  if (temporary) {
    std::error_code ec;
    std::filesystem::remove_all(log_dir, ec);
  }
  return rc;
}
