// Campaign benchmark: a generative campaign over N operators whose author takes L seconds a
// kernel (a model or an agent thinking), every other operator needing a second version after
// feedback, evaluated on this machine's CPU. Run side by side in one run:
//   serial      BackendBench's loop: per operator, write a version, then evaluate it, then the
//               next version or operator (one runner, nothing overlaps)
//   pipelined   bbcluster's generative layer with 1 author, then with 4 authors: kernels are
//               evaluated as soon as they exist while the authors write the next ones
// Prints wall times, the ratios, and the evaluator's busy share.
//
//   bench_campaign [OPERATORS] [AUTHOR_SECONDS]

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/coordinator.hpp"
#include "actors/generative_generator.hpp"
#include "actors/reporter.hpp"
#include "artefacts/kernel_dir.hpp"
#include "process/runner_supervisor.hpp"
#include "messages/errors.hpp"
#include "programs/local_node.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

const char* unary_ops[] = {"relu", "neg", "abs", "exp", "sin", "cos", "tanh", "sigmoid",
                           "sqrt", "floor", "ceil", "round", "trunc", "log1p", "expm1", "erf"};

const std::string input = "((T([512, 512], f32),), {})";

// The kernel an author writes: v1 of every other operator is wrong (feedback, then v2).
std::string kernel_code(const bb::op_brief& op, uint32_t version, size_t index) {
  auto base = op.op_name.substr(5, op.op_name.find('.', 5) - 5);
  auto call = "torch.ops.aten." + base + ".default(x)";
  bool wrong = version == 1 && index % 2 == 1;
  return "import torch\n\ndef " + op.folder + "_kernel_impl(x):\n    return " + call
         + (wrong ? " + 1.0" : "") + "\n";
}

size_t op_index(const std::string& op_name) {
  for (size_t i = 0; i < std::size(unary_ops); ++i)
    if (op_name == std::string("aten.") + unary_ops[i] + ".default")
      return i;
  return 0;
}

bb::author_actor::behavior_type sim_author(bb::author_actor::pointer, double latency) {
  return {
    [latency](bb::atom::write, const bb::author_request& req) {
      std::this_thread::sleep_for(std::chrono::duration<double>(latency));
      bb::author_reply r;
      r.code = kernel_code(req.op, req.version, op_index(req.op.op_name));
      r.seconds = latency;
      return r;
    },
  };
}

bb::settings quick_settings() {
  bb::settings s;
  s.timing.cpu_warmup = 1;
  s.timing.cpu_runs = 5;
  s.devices = 1;
  s.device = "cpu";
  s.log_level = "warn";
  s.runner = BB_BIN_DIR "/bbrunner";
  return s;
}

double serial_seconds(const std::vector<bb::op_brief>& ops, double latency, const std::string& dir,
                      double& eval_seconds) {
  bb::run_folder folder;
  folder.create(dir, "serial", {}, "bench");
  bb::runner_supervisor runner;
  bb::runner_spec spec;
  spec.program = BB_BIN_DIR "/bbrunner";
  spec.options.cpu_warmup = 1;
  spec.options.cpu_runs = 5;
  spec.log_path = dir + "/serial-runner.log";
  if (auto err = runner.start(spec, 60000); !err.empty()) {
    std::fprintf(stderr, "bench_campaign: %s\n", err.c_str());
    return -1;
  }
  auto start = clock_type::now();
  eval_seconds = 0;
  uint64_t id = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (uint32_t version = 1; version <= 2; ++version) {
      std::this_thread::sleep_for(std::chrono::duration<double>(latency));
      std::string err;
      auto path = folder.write_version(ops[i].folder, version, bb::kernel_kind::py, kernel_code(ops[i], version, i), err);
      bb::eval_job job;
      job.job_id = ++id;
      job.attempt = 1;
      job.op_name = ops[i].op_name;
      bb::read_kernel_file(path, ops[i].folder, job.kernel);
      job.correctness_inputs = {input};
      job.performance_inputs = {input};
      auto eval_start = clock_type::now();
      auto out = runner.evaluate(job, 60000, 60000);
      eval_seconds += std::chrono::duration<double>(clock_type::now() - eval_start).count();
      bool correct = !out.result.correctness.empty() && out.result.correctness[0].is_correct;
      if (correct)
        break;
    }
  }
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double pipelined_seconds(const std::vector<bb::op_brief>& ops, double latency, size_t authors,
                         const std::string& dir, size_t& versions) {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto node = bb::spawn_local_node(sys, quick_settings(), "bench", dir);
  bb::generative_config g;
  g.backend = "bench";
  g.ops = ops;
  g.policy.max_versions = 2;
  g.folder.create(dir, "pipelined" + std::to_string(authors), {}, "bench");
  std::vector<bb::author_actor> pool;
  for (size_t i = 0; i < authors; ++i)
    pool.push_back(sys.spawn<caf::detached>(sim_author, latency));
  auto generator = sys.spawn(bb::generative_generator, g, pool);
  bb::reporter_config rcfg;
  rcfg.log_dir = dir + "/report" + std::to_string(authors);
  rcfg.command = "bench";
  rcfg.expected_jobs = ops.size();
  auto reporter = sys.spawn<caf::detached>(bb::reporter, std::move(rcfg));
  bb::coordinator_config c;
  c.numbered_versions = true;
  for (auto& op : ops)
    c.work.ops.push_back({op.op_name, {input}, {input}});
  auto coordinator = sys.spawn(bb::coordinator, c, generator, node.evaluators, reporter, node.compiler);
  caf::scoped_actor self{sys};
  auto start = clock_type::now();
  double seconds = -1;
  self->request(coordinator, caf::infinite, bb::atom::run_v)
    .receive([&](bb::sweep_report&) { seconds = std::chrono::duration<double>(clock_type::now() - start).count(); },
             [&](caf::error& err) { std::fprintf(stderr, "bench_campaign: %s\n", bb::describe(err).c_str()); });
  versions = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(g.folder.path()))
    versions += e.path().filename().string().find("_implementation_v") != std::string::npos;
  for (auto& a : std::vector<caf::actor>{caf::actor_cast<caf::actor>(coordinator),
                                         caf::actor_cast<caf::actor>(reporter),
                                         caf::actor_cast<caf::actor>(generator)})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  for (auto& a : pool)
    self->send_exit(a, caf::exit_reason::user_shutdown);
  bb::stop_local_node(sys, node);
  return seconds;
}

} // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::min<size_t>(std::stoul(argv[1]), std::size(unary_ops)) : 12;
  double latency = argc > 2 ? std::stod(argv[2]) : 1.0;
  spdlog::set_level(spdlog::level::warn);
  char tmpl[] = "/tmp/bench-campaign-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::vector<bb::op_brief> ops;
  for (size_t i = 0; i < n; ++i)
    ops.push_back(bb::make_op_brief(std::string("aten.") + unary_ops[i] + ".default", "", {input}));
  double eval_seconds = 0;
  auto serial = serial_seconds(ops, latency, dir, eval_seconds);
  size_t versions1 = 0, versions4 = 0;
  auto one = pipelined_seconds(ops, latency, 1, dir, versions1);
  auto four = pipelined_seconds(ops, latency, 4, dir, versions4);
  auto versions = versions4;
  std::printf("%zu operators, %zu kernel versions (every other operator needs a second after "
              "feedback), author latency %.1f s, 1 CPU evaluator\n", n, versions, latency);
  std::printf("  serial (write, evaluate, repeat):  %6.1f s  (writing %.1f s + evaluating %.1f s)\n",
              serial, latency * static_cast<double>(versions), eval_seconds);
  std::printf("  pipelined, 1 author:               %6.1f s  (%.2fx faster than serial)\n", one, serial / one);
  std::printf("  pipelined, 4 authors:              %6.1f s  (%.2fx faster than serial, %.2fx than 1 author)\n",
              four, serial / four, one / four);
  std::printf("  evaluator busy share, 4 authors:   %5.0f%%  (the serial run's evaluation time / wall time)\n",
              100.0 * eval_seconds / four);
  if (versions1 != versions4)
    std::printf("  (1 author wrote %zu versions)\n", versions1);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
