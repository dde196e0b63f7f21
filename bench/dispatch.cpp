// Dispatch benchmark: a trivial kernel (aten relu on two floats, one timed call) run as N
// jobs three ways, side by side in one run: directly in one runner (no actors, no network),
// through coordinator -> one local bbnode -> runner, and through three local bbnodes.
// Prints jobs per second, the coordinator's cost per job over the direct runner, and ratios.
//
//   bench_dispatch [JOBS]

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/aten_generator.hpp"
#include "actors/coordinator.hpp"
#include "actors/reporter.hpp"
#include "cluster/config.hpp"
#include "process/runner_supervisor.hpp"
#include "messages/errors.hpp"
#include "programs/launch_nodes.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

bb::suite trivial_suite(size_t jobs) {
  bb::suite s;
  s.name = "dispatch";
  for (size_t i = 0; i < jobs; ++i)
    s.ops.push_back({"aten.relu.default", {"((T([2], f32),), {})"}, {"((T([2], f32),), {})"}});
  return s;
}

bb::settings quick_settings() {
  bb::settings s;
  s.timing.cpu_warmup = 0;
  s.timing.cpu_runs = 1;
  s.log_level = "warn";
  s.runner = BB_BIN_DIR "/bbrunner";
  return s;
}

double direct_seconds(size_t jobs, const std::string& dir) {
  bb::runner_supervisor runner;
  bb::runner_spec spec;
  spec.program = BB_BIN_DIR "/bbrunner";
  spec.options.cpu_warmup = 0;
  spec.options.cpu_runs = 1;
  spec.log_path = dir + "/direct.log";
  if (auto err = runner.start(spec, 60000); !err.empty()) {
    std::fprintf(stderr, "bench_dispatch: %s\n", err.c_str());
    return -1;
  }
  auto suite = trivial_suite(jobs);
  auto start = clock_type::now();
  for (size_t i = 0; i < jobs; ++i) {
    bb::eval_job job;
    job.job_id = i + 1;
    job.attempt = 1;
    job.op_name = suite.ops[i].op_name;
    job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
    job.correctness_inputs = suite.ops[i].correctness;
    job.performance_inputs = suite.ops[i].performance;
    runner.evaluate(job, 60000, 60000);
  }
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double cluster_seconds(size_t jobs, size_t nodes, const std::string& dir) {
  auto hosts = dir + "/hosts" + std::to_string(nodes) + ".txt";
  {
    std::ofstream out(hosts);
    for (size_t i = 0; i < nodes; ++i)
      out << "node" << i << " slots=1\n";
  }
  auto config = dir + "/quick.toml";
  std::ofstream(config) << "[timing]\ncpu_warmup = 0\ncpu_runs = 1\n[log]\nlevel = \"warn\"\n[evaluator]\nrunner = \""
                        << BB_BIN_DIR "/bbrunner\"\n";
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  bb::cluster c;
  bb::cluster_request req{hosts, "local", config, dir + "/run" + std::to_string(nodes), quick_settings()};
  if (auto err = bb::open_cluster(sys, req, c); !err.empty()) {
    std::fprintf(stderr, "bench_dispatch: %s\n", err.c_str());
    return -1;
  }
  bb::reporter_config rcfg;
  rcfg.command = "bench";
  rcfg.expected_jobs = jobs;
  auto reporter = sys.spawn<caf::detached>(bb::reporter, std::move(rcfg));
  auto generator = sys.spawn(bb::aten_generator);
  bb::coordinator_config ccfg;
  ccfg.work = trivial_suite(jobs);
  auto coordinator = sys.spawn(bb::coordinator, ccfg, generator, c.slots, reporter, bb::compile_pool_actor{});
  caf::scoped_actor self{sys};
  auto start = clock_type::now();
  double seconds = -1;
  self->request(coordinator, caf::infinite, bb::atom::run_v)
    .receive([&](bb::sweep_report&) { seconds = std::chrono::duration<double>(clock_type::now() - start).count(); },
             [&](caf::error& err) { std::fprintf(stderr, "bench_dispatch: %s\n", bb::describe(err).c_str()); });
  self->send_exit(coordinator, caf::exit_reason::user_shutdown);
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
  self->send_exit(generator, caf::exit_reason::user_shutdown);
  bb::close_cluster(c);
  return seconds;
}

} // namespace

int main(int argc, char** argv) {
  size_t jobs = argc > 1 ? std::stoul(argv[1]) : 200;
  spdlog::set_level(spdlog::level::warn);
  char tmpl[] = "/tmp/bench-dispatch-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto direct = direct_seconds(jobs, dir);
  auto one = cluster_seconds(jobs, 1, dir);
  auto three = cluster_seconds(jobs, 3, dir);
  std::printf("%zu jobs of a trivial kernel (relu on 2 floats, one timed call), CPU\n", jobs);
  std::printf("  direct, one runner:         %8.1f jobs/s\n", jobs / direct);
  std::printf("  coordinator -> 1 node:      %8.1f jobs/s  (%.2fx of direct)\n", jobs / one, direct / one);
  std::printf("  coordinator -> 3 nodes:     %8.1f jobs/s  (%.2fx of direct, %.2fx of 1 node)\n",
              jobs / three, direct / three, one / three);
  std::printf("  coordinator cost per job over a direct runner (1 node): %.2f ms\n",
              1e3 * (one - direct) / static_cast<double>(jobs));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
