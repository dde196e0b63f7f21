// bbcluster: the coordinator process of a sweep. Parses the command line (BackendBench's
// flags plus ours), loads settings, spawns reporter, generator, compile pool, evaluators and
// coordinator, runs the sweep and prints BackendBench's three scores.

#include <filesystem>
#include <iostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/aten_generator.hpp"
#include "actors/coordinator.hpp"
#include "actors/directory_generator.hpp"
#include "actors/reporter.hpp"
#include "cluster/curve_keys.hpp"
#include "suite/ops.hpp"
#include "suite/plan.hpp"
#include "results/resume.hpp"
#include "messages/errors.hpp"
#include "nodes/cli.hpp"
#include "nodes/cluster.hpp"
#include "nodes/local_node.hpp"

int main(int argc, char** argv) {
  // bbcluster keygen DIR: the CURVE keys of a cluster.
  if (argc >= 2 && std::string(argv[1]) == "keygen") {
    if (argc != 3) {
      std::cerr << "bbcluster: usage: bbcluster keygen DIR\n";
      return 2;
    }
    if (auto err = bb::generate_curve_keys(argv[2]); !err.empty()) {
      std::cerr << "bbcluster: " << err << "\n";
      return 1;
    }
    std::cout << "keys in " << argv[2] << ": coordinator.key stays with bbcluster (nodes.keys = \""
              << argv[2] << "\"); copy the folder to every node and start bbnode --keys "
              << argv[2] << "\n";
    return 0;
  }
  CLI::App app{"bbcluster: evaluates generated PyTorch operator kernels, BackendBench-compatible"};
  bb::cli::flags f;
  bb::cli::add_flags(app, f);
  // --resume RUN_DIR runs the recorded sweep again, from where it is started.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (auto err = bb::cli::expand_resume(args); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 2;
  }
  std::vector<char*> words{argv[0]};
  for (auto& a : args)
    words.push_back(a.data());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbcluster: error: " << e.what() << " (see --help)\n";
    return 2;
  }
  bb::settings s;
  if (auto err = bb::cli::merge_settings(app, f, s); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bbcluster"));
  spdlog::set_level(spdlog::level::from_str(s.log_level));

  auto plan = bb::make_plan({f.suite, f.data, bb::ops::split_tokens(f.ops), static_cast<size_t>(f.topn),
                            f.overhead_dominated});
  if (!plan.fatal.empty()) {
    std::cerr << "bbcluster: " << plan.fatal << "\n";
    return 2;
  }
  bb::cli::report_plan(plan);
  std::vector<bb::directory_kernel> kernels;
  if (auto err = bb::cli::attach_flag_gems(f, s, plan); !err.empty()) {
    std::cerr << "bbcluster: " << err << "\n";
    return 2;
  }
  if (f.backend == "directory")
    if (auto err = bb::cli::attach_directory(f.ops_directory, s, plan, kernels); !err.empty()) {
      std::cerr << "bbcluster: " << err << "\n";
      return 2;
    }
  if (f.list) {
    std::vector<std::string> names;
    for (auto& op : plan.work.ops)
      names.push_back(op.op_name);
    std::string err;
    auto schemas = bb::cli::resolve_ops(names, s, err);
    if (!schemas) {
      std::cerr << "bbcluster: cannot resolve operators: " << err << "\n";
      return 1;
    }
    std::cout << bb::format_op_list(plan.work, *schemas) << bb::format_exclusions(plan) << std::flush;
    return 0;
  }
  bool generative_run = f.backend == "llm" || f.backend == "kernel_agent";
  std::string run_dir = f.disable_output_logs ? "" : (s.log_dir.empty() ? bb::cli::timestamped_dir() : s.log_dir);
  std::string scratch = run_dir;
  if (run_dir.empty()) {
    char tmpl[] = "/tmp/bbcluster-XXXXXX";
    scratch = mkdtemp(tmpl) ? tmpl : "/tmp";
  }

  auto command = bb::cli::command_line(words);
  bb::cli::resumed_sweep resumed;
  if (!f.resume.empty()) {
    if (auto err = bb::cli::read_resumed_sweep(run_dir, s, plan, resumed); !err.empty()) {
      std::cerr << "bbcluster: cannot resume: " << err << "\n";
      return 2;
    }
  }
  // The generative backends are checked (a model, KernelAgent importable) before anything
  // starts or is written.
  bb::cli::generative_plan gplan;
  if (generative_run) {
    auto err = bb::cli::prepare_generative(f, s, plan, run_dir, command, resumed, gplan);
    if (!err.empty()) {
      std::cerr << "bbcluster: " << err << "\n";
      return 2;
    }
  }
  if (f.resume.empty() && !run_dir.empty()) {
    std::error_code ec;
    if (auto err = bb::write_sweep_record(run_dir, {args, std::filesystem::current_path(ec).string()}); !err.empty())
      spdlog::warn("bbcluster: {} (this sweep cannot be resumed)", err);
  }
  auto total_ops = plan.work.ops.size();
  bb::cli::drop_resumed_ops(resumed, plan);

  int rc = 0;
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::bb>();
    caf::actor_system sys{cfg};
    // Evaluators: this process's own node, or the slots of the nodes of --nodes (which build
    // their own kernels).
    bb::local_node local;
    bb::cluster nodes;
    if (f.nodes.empty() && f.launcher != "slurm") {
      local = bb::spawn_local_node(sys, s, "local", scratch);
    } else {
      bb::cluster_request creq{f.nodes, f.launcher, f.config, scratch, s};
      if (auto err = bb::open_cluster(sys, creq, nodes); !err.empty()) {
        std::cerr << "bbcluster: " << err << "\n";
        bb::close_cluster(nodes);
        return 2;
      }
      local.evaluators = nodes.slots;
    }
    bb::cli::generative_backend generative;
    bb::generator_actor generator;
    if (generative_run) {
      generative = bb::cli::spawn_generative(sys, gplan);
      generator = generative.generator;
    } else {
      generator = f.backend == "directory" ? sys.spawn(bb::directory_generator, kernels)
                                           : sys.spawn(bb::aten_generator);
    }
    auto reporter = sys.spawn(bb::reporter, bb::reporter_config{run_dir, command, s.p, total_ops,
                                                                resumed.previous});
    for (auto& r : resumed.concluded)
      caf::anon_send(reporter, bb::atom::result_v, r);
    bb::coordinator_config ccfg;
    if (generative_run) {
      // The generative layer bounds its authors itself; requests wait their turn there.
      ccfg.generate_timeout = std::chrono::hours(24 * 30);
      ccfg.numbered_versions = true;
      ccfg.first_versions = resumed.first_versions;
    }
    ccfg.work = plan.work;
    ccfg.max_attempts = static_cast<uint32_t>(s.max_attempts);
    ccfg.evaluate_timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(s.start_timeout_s + 2 * s.job_timeout_s + 30));
    auto coordinator = sys.spawn(bb::coordinator, ccfg, generator, local.evaluators, reporter,
                                 local.compiler);
    for (auto& link : nodes.links)
      link->set_coordinator(coordinator);

    caf::scoped_actor self{sys};
    self->request(coordinator, caf::infinite, bb::atom::run_v)
      .receive(
        [&](bb::sweep_report& report) {
          std::cout << report.scores_text << std::flush;
          if (report.failed_jobs > 0)
            spdlog::warn("bbcluster: {} of {} jobs failed as a whole (a kernel that did not "
                         "build, load or finish; see failed_tests.json)", report.failed_jobs, report.jobs);
          if (!report.log_dir.empty())
            spdlog::info("bbcluster: reports in {}", std::filesystem::absolute(report.log_dir).string());
          if (!generative.run_folder.empty())
            spdlog::info("bbcluster: kernels in {}; evaluate them again with --backend directory "
                         "--ops-directory {}", generative.run_folder, generative.run_folder);
        },
        [&](caf::error& err) {
          spdlog::error("bbcluster: sweep failed: {}", bb::describe(err));
          rc = 1;
        });
    self->send_exit(coordinator, caf::exit_reason::user_shutdown);
    bb::close_cluster(nodes);
    bb::stop_local_node(sys, local);
    self->send_exit(generator, caf::exit_reason::user_shutdown);
    for (auto& a : generative.authors)
      self->send_exit(a, caf::exit_reason::user_shutdown);
    self->send_exit(reporter, caf::exit_reason::user_shutdown);
  }
  // The actor system is gone: no runner writes its log any more.
  if (run_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  return rc;
}
