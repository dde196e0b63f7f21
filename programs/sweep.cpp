#include "programs/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "actors/aten_generator.hpp"
#include "actors/coordinator.hpp"
#include "actors/directory_generator.hpp"
#include "actors/reporter.hpp"
#include "actors/slot_watch.hpp"
#include "cluster/local_nodes.hpp"
#include "messages/errors.hpp"
#include "messages/input_stream.hpp"
#include "messages/runner_protocol.hpp"
#include "process/proc.hpp"
#include "process/runner_supervisor.hpp"
#include "results/resume.hpp"
#include "suite/ops.hpp"

namespace bb {

namespace {

// SIGINT and SIGTERM, counted; the sweep's watcher acts on them.
std::atomic<int> signals_seen{0};
std::atomic<int> first_signal{0};

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  first_signal.compare_exchange_strong(none, sig);
  ++signals_seen;
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// This process's runners (each the leader of its own process group: bbrunner itself, or the
// bwrap of its sandbox, which takes the runner with it) and their groups.
void kill_runners() {
  for (auto& child : children_of(::getpid()))
    if (child.name == "bbrunner" || child.name == "bwrap") {
      ::kill(-child.pid, SIGKILL);
      ::kill(child.pid, SIGKILL);
    }
}

} // namespace

int prepare_sweep(const CLI::App& app, const program::flags& given, const std::vector<std::string>& args,
                  const std::vector<char*>& words, sweep_setup& out) {
  auto fail = [](const std::string& why) {
    std::cerr << "bbcluster: " << why << "\n";
    return 2;
  };
  out.f = given;
  auto& f = out.f; // BackendBench's flags map onto ours here
  if (auto err = program::merge_settings(app, f, out.s); !err.empty())
    return fail(err);
  spdlog::set_level(spdlog::level::from_str(out.s.log_level));
  out.plan = make_plan({f.suite, f.data, ops::split_tokens(f.ops), static_cast<size_t>(f.topn),
                        f.smallest_inputs, f.overhead_dominated});
  program::report_plan(out.plan);
  if (!out.plan.fatal.empty())
    return fail(out.plan.fatal);
  if (auto err = program::attach_flag_gems(f, out.s, out.plan); !err.empty())
    return fail(err);
  if (f.backend == "directory")
    if (auto err = program::attach_directory(f.ops_directory, out.s, out.plan, out.kernels); !err.empty())
      return fail(err);
  if (f.list) {
    std::vector<std::string> names;
    for (auto& op : out.plan.work.ops)
      names.push_back(op.op_name);
    std::string err;
    auto schemas = program::resolve_ops(names, out.s, err);
    if (!schemas) {
      std::cerr << "bbcluster: cannot resolve operators: " << err << "\n";
      return 1;
    }
    std::cout << format_op_list(out.plan.work, *schemas) << format_exclusions(out.plan) << std::flush;
    return 0;
  }
  out.generative = f.backend == "llm" || f.backend == "kernel_agent";
  out.run_dir = f.disable_output_logs ? "" : (out.s.log_dir.empty() ? program::timestamped_dir() : out.s.log_dir);
  out.scratch = out.run_dir;
  if (out.run_dir.empty()) {
    char tmpl[] = "/tmp/bbcluster-XXXXXX";
    out.scratch = ::mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  out.command = program::command_line(words);
  if (!out.run_dir.empty()) {
    // The folder's one owner from here on: nothing is read from or written to it before.
    auto holder = f.resume.empty() ? out.command : resume_command_for(out.run_dir);
    if (auto err = out.lock.acquire(out.run_dir, holder); !err.empty())
      return fail(err);
    for (auto& node : end_left_nodes(out.run_dir + "/nodes", 10))
      spdlog::warn("bbcluster: ended node {} (pid {}), left running by the sweep of pid {} on this "
                   "folder, which is gone", node.name, node.pid, node.coordinator);
  }
  if (!f.resume.empty()) {
    // What the reports show: the sweep's own command, not --resume's expansion of it.
    sweep_record record;
    if (read_sweep_record(out.run_dir, record).empty())
      out.command = recorded_command(record);
  }
  // The reports state these, whether reference times came from the cache among them; a resume
  // must match all but that one (the cache holds what the same conditions measured).
  out.conditions = program::sweep_conditions(out.s, out.kernels, program::runs_on_nodes(f));
  auto conditions = out.conditions;
  conditions.erase("timing.reference_cache");
  if (!f.resume.empty()) {
    if (auto err = program::check_resumed_conditions(out.run_dir, conditions, f.resume_anyway); !err.empty())
      return fail(err);
    if (auto err = program::read_resumed_sweep(out.run_dir, out.s, out.plan, out.resumed); !err.empty())
      return fail("cannot resume: " + err);
  }
  // The generative backends are checked (a model, KernelAgent importable) before anything
  // starts or is written.
  if (out.generative)
    if (auto err = program::prepare_generative(f, out.s, out.plan, out.run_dir, out.command, out.resumed, out.gplan);
        !err.empty())
      return fail(err);
  if (f.resume.empty() && !out.run_dir.empty()) {
    std::error_code ec;
    sweep_record record{args, std::filesystem::current_path(ec).string(), conditions};
    if (auto err = write_sweep_record(out.run_dir, record); !err.empty()) {
      spdlog::error("bbcluster: {} (this sweep cannot be resumed)", err);
      out.failed_writes.push_back(err);
    }
  }
  for (auto& op : out.plan.work.ops)
    out.inputs_per_op[op.op_name] = op.correctness.size();
  program::drop_resumed_ops(out.resumed, out.plan);
  return -1;
}

sweep::sweep(sweep_setup setup) : setup_(std::move(setup)) {
}

sweep::~sweep() {
  stop();
}

std::string sweep::start() {
  catch_stop_signals();
  start_console();
  // The system keeps a reference to its configuration: both live as long as the sweep.
  sys_cfg_ = std::make_unique<caf::actor_system_config>();
  sys_cfg_->add_message_types<caf::id_block::bb>();
  sys_ = std::make_unique<caf::actor_system>(*sys_cfg_);
  stops_.push_back([this] {
    // Handles must not outlive their actor system.
    coordinator_ = nullptr;
    generator_ = nullptr;
    generative_ = {};
    reporter_ = nullptr;
    evaluators_.clear();
    local_ = {};
    nodes_ = {};
    sys_.reset(); // waits for every actor: no runner writes its log any more
    if (setup_.run_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(setup_.scratch, ec);
    }
  });
  start_reporter();
  if (auto err = start_evaluators(); !err.empty())
    return err;
  start_generator();
  start_coordinator();
  return "";
}

void sweep::stop() {
  while (!stops_.empty()) {
    auto last = std::move(stops_.back());
    stops_.pop_back();
    last();
  }
}

void sweep::start_console() {
  board_ = std::make_shared<progress_board>(setup_.inputs_per_op, setup_.resumed.previous);
  for (auto& w : setup_.failed_writes)
    board_->write_failed(w);
  console_ = std::make_unique<console>(board_, choose_progress_mode(setup_.f.quiet, STDERR_FILENO),
                                       setup_.s.progress_interval_s);
  auto logger = std::make_shared<spdlog::logger>("bbcluster", console_->sink());
  logger->set_level(spdlog::level::from_str(setup_.s.log_level));
  spdlog::set_default_logger(logger);
  stops_.push_back([this] { console_->stop(); });
}

void sweep::start_reporter() {
  reporter_config rcfg;
  rcfg.log_dir = setup_.run_dir;
  rcfg.command = setup_.command;
  rcfg.conditions = setup_.conditions;
  rcfg.p = setup_.s.p;
  rcfg.expected_jobs = setup_.inputs_per_op.size();
  rcfg.previous = setup_.resumed.previous;
  rcfg.previous_versions = setup_.resumed.versions;
  rcfg.board = board_;
  rcfg.not_evaluated = setup_.f.not_evaluated;
  std::error_code ec;
  if (setup_.f.backend == "directory")
    rcfg.kernel_dir = std::filesystem::absolute(setup_.f.ops_directory, ec).string();
  else if (setup_.generative)
    rcfg.kernel_dir = std::filesystem::absolute(setup_.gplan.generator.folder.path(), ec).string();
  rcfg.reports_interval_s = setup_.s.reports_interval_s;
  // Detached: rewriting the reports takes no thread of the shared scheduler.
  reporter_ = sys_->spawn<caf::detached>(reporter, std::move(rcfg));
  for (auto& r : setup_.resumed.concluded)
    caf::anon_send(reporter_, atom::result_v, r);
  stops_.push_back([this] { caf::anon_send_exit(reporter_, caf::exit_reason::user_shutdown); });
}

std::string sweep::start_evaluators() {
  auto& f = setup_.f;
  // This process's own node, or the slots of the nodes of --nodes (which build their own
  // kernels).
  if (!program::runs_on_nodes(f)) {
    if (auto refusal = sandbox_refusal(setup_.s); !refusal.empty())
      return refusal;
    local_ = spawn_local_node(*sys_, setup_.s, "local", setup_.scratch);
    stops_.push_back([this] { stop_local_node(*sys_, local_); });
    evaluators_ = watch_slots(*sys_, local_.evaluators, "local", board_);
    return "";
  }
  cluster_request creq{f.nodes, f.launcher, f.config, setup_.scratch, setup_.s};
  stops_.push_back([this] { close_cluster(nodes_); });
  if (auto err = open_cluster(*sys_, creq, nodes_); !err.empty())
    return err;
  // Each node's slots under its name.
  size_t next = 0;
  for (auto& link : nodes_.links) {
    std::vector<evaluator_actor> slots(nodes_.slots.begin() + static_cast<long>(next),
                                       nodes_.slots.begin() + static_cast<long>(next + link->info().slots));
    next += link->info().slots;
    auto watched = watch_slots(*sys_, slots, link->info().name, board_);
    evaluators_.insert(evaluators_.end(), watched.begin(), watched.end());
  }
  return "";
}

void sweep::start_generator() {
  if (setup_.generative) {
    generative_ = program::spawn_generative(*sys_, setup_.gplan);
    generator_ = generative_.generator;
  } else {
    generator_ = setup_.f.backend == "directory" ? sys_->spawn(directory_generator, setup_.kernels)
                                                 : sys_->spawn(aten_generator);
  }
  stops_.push_back([this] {
    caf::anon_send_exit(generator_, caf::exit_reason::user_shutdown);
    for (auto& a : generative_.authors)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  });
}

void sweep::start_coordinator() {
  auto& s = setup_.s;
  coordinator_config ccfg;
  if (setup_.generative) {
    // The generative layer bounds its authors itself; requests wait their turn there.
    ccfg.generate_timeout = std::chrono::hours(24 * 30);
    ccfg.numbered_versions = true;
    ccfg.first_versions = setup_.resumed.first_versions;
  }
  ccfg.work = setup_.plan.work;
  ccfg.max_attempts = static_cast<uint32_t>(s.max_attempts);
  ccfg.shards_per_slot = shards_per_slot(s);
  // A campaign's versions are judged whole, and a resumed campaign takes up versions, not
  // shards: the bound on a shard's length is a sweep's.
  ccfg.max_shard_seconds = setup_.generative ? 0.0 : s.max_shard_s;
  // Shards are sized by expected work: worth estimating when there is more than one slot, or
  // on one slot when an operator may be longer than the bound (judged from tensor bytes first,
  // which costs no reading of the reference-time cache).
  bool estimate = ccfg.shards_per_slot > 0 && evaluators_.size() > 1;
  if (!estimate && ccfg.shards_per_slot > 0 && ccfg.max_shard_seconds > 0) {
    auto rough = program::estimate_sweep_work(ccfg.work, s, slot_device(), false);
    estimate = std::any_of(rough.begin(), rough.end(),
                           [&](const auto& op) { return op.second.total() > ccfg.max_shard_seconds / 2; });
  }
  if (estimate)
    ccfg.estimates = program::estimate_sweep_work(ccfg.work, s, slot_device());
  ccfg.earlier_shards = setup_.resumed.shards;
  ccfg.job_settings = pack_settings(runner_options_of(s));
  // Each input as it ends, from local slots and nodes alike: the progress counts it then, not
  // only when its operator (of up to thousands of inputs) ends.
  ccfg.stream_tag = "sweep";
  set_input_sink([board = board_](const std::string&, const eval_result& records, uint32_t index) {
    if (!records.correctness.empty())
      board->input_done(records.op_name, index);
  });
  stops_.push_back([] { set_input_sink({}); });
  ccfg.evaluate_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(evaluate_timeout_s(s)));
  coordinator_ = sys_->spawn(coordinator, ccfg, generator_, evaluators_, reporter_, local_.compiler);
  for (auto& link : nodes_.links)
    link->set_coordinator(coordinator_);
  stops_.push_back([this] { caf::anon_send_exit(coordinator_, caf::exit_reason::user_shutdown); });
}

std::string sweep::slot_device() const {
  if (!nodes_.links.empty())
    return nodes_.links.front()->info().device;
  return local_.info.device.empty() ? "cpu" : local_.info.device;
}

void sweep::halt() {
  board_->stopping("stopping now: running jobs abandoned, their runners killed");
  spdlog::warn("bbcluster: stopping now: the running jobs are abandoned and their runners killed");
  caf::anon_send(coordinator_, atom::halt_v);
  refuse_new_runners();
  kill_runners();
}

void sweep::watch_signals(const std::atomic<bool>& done) {
  using clock = std::chrono::steady_clock;
  int seen = 0;
  bool halted = false;
  clock::time_point first_at;
  auto grace = std::chrono::duration<double>(setup_.s.grace_s);
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int now = signals_seen;
    if (now > seen && seen == 0) {
      first_at = clock::now();
      board_->stopping("stopping: running jobs finish (at most " + format_duration(setup_.s.grace_s)
                       + "); interrupt again to stop now");
      spdlog::warn("bbcluster: {} received: no new jobs; the running ones get {} s to finish "
                   "(interrupt again to stop now)", first_signal == SIGINT ? "SIGINT" : "SIGTERM",
                   setup_.s.grace_s);
      caf::anon_send(coordinator_, atom::stop_v);
    }
    if (!halted && seen > 0 && (now > seen || clock::now() - first_at > grace)) {
      halted = true;
      halt();
    }
    seen = now;
  }
}

int sweep::run() {
  int rc = 0;
  std::atomic<bool> done{false};
  console_->start();
  std::thread watcher([&] { watch_signals(done); });
  sweep_report report;
  bool answered = false;
  {
    caf::scoped_actor self{*sys_};
    self->request(coordinator_, caf::infinite, atom::run_v)
      .receive(
        [&](sweep_report& r) {
          report = std::move(r);
          answered = true;
        },
        [&](caf::error& err) {
          spdlog::error("bbcluster: sweep failed: {}", describe(err));
          rc = 1;
        });
  }
  done = true;
  watcher.join();
  console_->stop();
  if (answered) {
    std::cout << report.scores_text << std::flush;
    std::cerr << report.profile_text << std::flush;
    if (report.failed_jobs > 0)
      spdlog::warn("bbcluster: {} of {} jobs failed as a whole (a kernel that did not build, load or "
                   "finish; see failed_tests.json)", report.failed_jobs, report.jobs);
    if (!report.log_dir.empty() && board_->failed_writes().empty())
      spdlog::info("bbcluster: reports in {} (report.html shows them)",
                   std::filesystem::absolute(report.log_dir).string());
    if (!generative_.run_folder.empty())
      spdlog::info("bbcluster: kernels in {}; evaluate them again with --backend directory "
                   "--ops-directory {}", generative_.run_folder, generative_.run_folder);
    if (report.partial) {
      if (setup_.run_dir.empty())
        spdlog::warn("bbcluster: stopped with {} of {} operators; --disable-output-logs kept no "
                     "journal to resume from", report.jobs, setup_.inputs_per_op.size());
      else
        spdlog::warn("bbcluster: stopped with {} of {} operators; the reports are partial. Go on with:\n  {}",
                     report.jobs, setup_.inputs_per_op.size(), resume_command_for(setup_.run_dir));
    }
  }
  if (signals_seen > 0)
    rc = 128 + first_signal;
  // The last line: what the run folder lacks, however the sweep ended.
  if (auto failed = board_->failed_writes(); !failed.empty()) {
    constexpr size_t named = 5;
    std::string files;
    for (size_t i = 0; i < failed.size() && i < named; ++i)
      files += (i ? "; " : "") + failed[i];
    if (failed.size() > named)
      files += "; and " + std::to_string(failed.size() - named) + " more";
    std::cerr << "bbcluster: the sweep's records are incomplete, " << failed.size()
              << (failed.size() == 1 ? " file" : " files") << " not written: " << files << std::endl;
    rc = rc == 0 ? 1 : rc;
  }
  return rc;
}

} // namespace bb
