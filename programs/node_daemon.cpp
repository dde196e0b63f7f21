#include "programs/node_daemon.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <unistd.h>

#include <caf/scoped_actor.hpp>

#include <spdlog/spdlog.h>

#include "transport/node_server.hpp"
#include "process/sandbox.hpp"
#include "messages/errors.hpp"
#include "results/scoring.hpp"
#include "suite/suite.hpp"

namespace bb {

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void on_stop_signal(int) {
  stop_requested = true;
}

} // namespace

void add_node_flags(CLI::App& app, node_options& o) {
  app.add_flag("--check", o.check, "start every slot's runner, evaluate relu, report, exit");
  app.add_option("--listen", o.listen, "ZeroMQ endpoint to serve coordinators on, e.g. tcp://127.0.0.1:5555");
  app.add_option("--name", o.name, "node name in reports (default: the host name)");
  app.add_option("--endpoint-file", o.endpoint_file, "write the bound endpoint here once listening");
  app.add_option("--coordinator-silence", o.silence_s, "seconds without a coordinator's word before it is forgotten");
  app.add_option("--keys", o.keys, "folder of `bbcluster keygen`: encrypt, and accept only the coordinator's key");
  app.add_option("--config", o.config, "settings file (TOML)")->check(CLI::ExistingFile);
  app.add_option("--devices", o.devices, "evaluator slots")->check(CLI::PositiveNumber);
  app.add_option("--log-dir", o.log_dir, "folder for runner and compile logs (default: a temporary folder)");
}

std::string prepare_node(node_options& o, node_setup& out) {
  if (o.check && !o.listen.empty())
    return "--check and --listen exclude each other";
  if (!o.check && o.listen.empty())
    return "give --listen ENDPOINT (serve a coordinator) or --check";
  // A bbnode runs whatever code it is sent: an open port is remote code execution.
  if (!o.listen.empty() && o.keys.empty() && !is_loopback_endpoint(o.listen))
    return "refusing to listen on " + o.listen
           + " without CURVE keys: make them with `bbcluster keygen DIR` and start bbnode "
             "with --keys DIR (or listen on tcp://127.0.0.1:PORT)";
  if (!o.keys.empty())
    for (auto err : {read_curve_keys(o.keys + "/node.key", out.node_keys),
                     read_curve_keys(o.keys + "/coordinator.pub", out.coordinator_key)})
      if (!err.empty())
        return err;
  if (!o.config.empty())
    if (auto err = load_settings(o.config, out.s))
      return describe(err);
  if (o.devices > 0)
    out.s.devices = o.devices;
  // The node's keys are hidden from its runners and compilers with the coordinator's.
  if (!o.keys.empty())
    out.s.node_keys = o.keys;
  if (auto err = validate(out.s))
    return describe(err);
  // A node does not know the coordinator's backend: checks.extra_inputs = "auto" is off here.
  out.s.timing.extra_inputs = extra_inputs_for(out.s, "");
  if (o.check) {
    sandbox_mode mode = sandbox_mode::automatic;
    from_string(out.s.sandbox, mode);
    auto how = decide_sandbox(mode);
    std::cout << "sandbox (evaluator.sandbox = " << out.s.sandbox << "): "
              << (how.wrap ? "works: runners and compilers run in namespaces"
                  : mode == sandbox_mode::off ? "off"
                  : "DOES NOT WORK here: " + sandbox_unavailable()
                      + (how.refusal.empty() ? " (runners run without one)" : ""))
              << "\n";
  }
  if (auto refusal = sandbox_refusal(out.s); !refusal.empty())
    return refusal;
  out.temporary_logs = o.log_dir.empty();
  if (out.temporary_logs) {
    char tmpl[] = "/tmp/bbnode-XXXXXX";
    o.log_dir = ::mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  if (o.name.empty()) {
    char host[256] = "local";
    ::gethostname(host, sizeof(host) - 1);
    o.name = host;
  }
  return "";
}

int check_slots(caf::actor_system& sys, const local_node& node) {
  auto smoke = smoke_suite().ops.front();
  caf::scoped_actor self{sys};
  int failures = 0;
  for (size_t slot = 0; slot < node.evaluators.size(); ++slot) {
    eval_job job;
    job.job_id = slot + 1;
    job.attempt = 1;
    job.op_name = smoke.op_name;
    job.kernel = {kernel_kind::aten, "", "", "aten", "", "", ""};
    job.correctness_inputs = smoke.correctness;
    self->request(node.evaluators[slot], std::chrono::seconds(120), atom::evaluate_v, job)
      .receive(
        [&](eval_result& r) {
          auto score = score_op(r.op_name, r.correctness, r.performance);
          bool ok = r.outcome == outcome::ok && score.correct;
          failures += ok ? 0 : 1;
          std::cout << "slot " << slot << ": " << (ok ? "ok" : "FAILED") << " (" << r.where.device
                    << ", torch " << r.where.torch_version << ")"
                    << (ok ? std::string() : ": " + std::string(to_string(r.outcome)) + " " + r.detail) << "\n";
        },
        [&](caf::error& err) {
          ++failures;
          std::cout << "slot " << slot << ": FAILED: " << describe(err) << "\n";
        });
  }
  return failures == 0 ? 0 : 1;
}

namespace {

// Whether `a` and `b` differ in a key a runner's or compiler's start fixes: any sweep key but
// the timer's and the checks', which every job carries (eval_job::settings).
bool slots_must_restart(const settings& a, const settings& b) {
  auto x = sweep_settings_of(a);
  auto y = sweep_settings_of(b);
  for (auto& [key, value] : x)
    if (key.rfind("timing.", 0) != 0 && key.rfind("checks.", 0) != 0 && y[key] != value)
      return true;
  return false;
}

} // namespace

std::string apply_session_settings(caf::actor_system& sys, const node_options& o,
                                   const settings& own, const std::map<std::string, std::string>& sent,
                                   size_t jobs_in_flight, settings& current, local_node& node,
                                   std::map<std::string, std::string>& applied) {
  // Over the node's own file, not the last session's: a key not sent is the node's.
  settings next = own;
  if (auto err = apply_sweep_settings(next, sent))
    return describe(err);
  if (auto err = validate(next))
    return describe(err);
  // The node's own sandbox "required" is a floor no coordinator lowers.
  if (own.sandbox == "required" && next.sandbox != "required")
    return "evaluator.sandbox: this node requires its sandbox (its --config says \"required\"), "
           "the coordinator sent \"" + next.sandbox + "\"";
  if (auto why = sandbox_refusal(next); !why.empty())
    return "evaluator.sandbox = \"required\": " + why;
  if (slots_must_restart(next, current)) {
    if (jobs_in_flight > 0)
      return std::string(busy_refusal) + "this node's slots must start again with the coordinator's "
             "settings and are finishing " + std::to_string(jobs_in_flight) + " jobs of an earlier session";
    std::string changed;
    for (auto& line : settings_differences(sweep_settings_of(next), sweep_settings_of(current)))
      changed += (changed.empty() ? "" : "; ") + line.substr(0, line.find(':'));
    spdlog::info("bbnode: the coordinator's settings differ from this node's ({}): its slots "
                 "start again with them", changed);
    stop_local_node(sys, node);
    node = spawn_local_node(sys, next, o.name, o.log_dir);
  }
  current = next;
  applied = sweep_settings_of(current);
  return "";
}

int serve_coordinators(caf::actor_system& sys, local_node& node, const node_options& o,
                       const node_setup& setup) {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  node_server_config ncfg;
  ncfg.endpoint = o.listen;
  ncfg.info = node.info;
  ncfg.coordinator_silence_s = o.silence_s;
  ncfg.public_key = setup.node_keys.public_key;
  ncfg.secret_key = setup.node_keys.secret_key;
  ncfg.coordinator_key = setup.coordinator_key.public_key;
  ncfg.evaluate_timeout_s = evaluate_timeout_s(setup.s);
  ncfg.max_message_mb = setup.s.max_message_mb;
  // Tell whoever started us where we listen, once bound.
  ncfg.on_bound = [&](const std::string& endpoint) {
    std::cout << "bbnode: listening on " << endpoint << std::endl;
    if (!o.endpoint_file.empty()) {
      std::ofstream(o.endpoint_file + ".tmp") << endpoint << "\n";
      std::filesystem::rename(o.endpoint_file + ".tmp", o.endpoint_file);
    }
  };
  settings current = setup.s;
  ncfg.apply_settings = [&](const std::map<std::string, std::string>& sent,
                            std::map<std::string, std::string>& applied, node_slots& slots) {
    auto why = apply_session_settings(sys, o, setup.s, sent, slots.jobs_in_flight, current, node,
                                      applied);
    slots.evaluators = node.evaluators;
    slots.compiler = node.compiler;
    slots.evaluate_timeout_s = evaluate_timeout_s(current);
    return why;
  };
  node_server server(sys, ncfg, node.evaluators, node.compiler);
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
    return 1;
  }
  return 0;
}

} // namespace bb
