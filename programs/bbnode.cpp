// bbnode: the node daemon hosting one evaluator per slot (one per GPU) and a compile pool.
// --listen ENDPOINT serves coordinators over ZeroMQ until SIGTERM or SIGINT; --check has every
// slot evaluate the smoke suite's relu and exits. The parts are in nodes/node_daemon.hpp.

#include <filesystem>
#include <iostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "programs/local_node.hpp"
#include "programs/node_daemon.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bbnode: hosts evaluators for bbcluster"};
  bb::node_options o;
  bb::add_node_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbnode: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  bb::node_setup setup;
  if (auto err = bb::prepare_node(o, setup); !err.empty()) {
    std::cerr << "bbnode: " << err << "\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbnode"));
  spdlog::set_level(spdlog::level::from_str(setup.s.log_level));

  int rc = 0;
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::bb>();
    caf::actor_system sys{cfg};
    auto node = bb::spawn_local_node(sys, setup.s, o.name, o.log_dir);
    rc = o.check ? bb::check_slots(sys, node) : bb::serve_coordinators(sys, node, o, setup);
    bb::stop_local_node(sys, node);
  }
  // The actor system is gone: no runner writes its log any more.
  if (setup.temporary_logs) {
    std::error_code ec;
    std::filesystem::remove_all(o.log_dir, ec);
  }
  return rc;
}
