#pragma once

// bbcluster's sweep as one unit: what the command line decided (sweep_setup), and the parts
// that run it, started in dependency order (console, actor system, reporter, nodes and their
// evaluators with the compile pool, generator, coordinator) and stopped in reverse, as
// Seastar's app does. SIGINT or SIGTERM stops dispatch; the running jobs get run.grace_s to
// finish (a second signal cuts it short and kills the runners); the reports are written
// marked partial and the command that resumes the sweep is printed. Wiring only.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "artefacts/kernel_dir.hpp"
#include "cluster/config.hpp"
#include "messages/types.hpp"
#include "programs/cli.hpp"
#include "programs/launch_nodes.hpp"
#include "programs/console.hpp"
#include "programs/local_node.hpp"
#include "results/progress_board.hpp"
#include "results/run_lock.hpp"
#include "suite/plan.hpp"

namespace bb {

/// Everything the command line and the files decided, before any actor runs.
struct sweep_setup {
  program::flags f;
  settings s;
  sweep_plan plan;
  std::vector<directory_kernel> kernels;
  /// The run folder; empty with --disable-output-logs (then `scratch` holds the logs).
  std::string run_dir;
  std::string scratch;
  /// The sweep's own command line (a resumed sweep's: the one it was started with).
  std::string command;
  /// What the sweep's figures depend on (sweep.json's conditions: the timer, its budgets and
  /// rounds, the checks, the device, torch), stated once in the reports.
  std::map<std::string, std::string> conditions;
  /// The run folder's lock, held as long as the sweep (results/run_lock.hpp).
  run_lock lock;
  program::resumed_sweep resumed;
  bool generative = false;
  program::generative_plan gplan;
  /// Every operator of the sweep with its number of inputs, those finished before included.
  std::map<std::string, uint64_t> inputs_per_op;
  /// Writes that failed before the sweep started (sweep.json): "cannot write PATH: why".
  std::vector<std::string> failed_writes;
};

/// Reads the command line (after --resume's expansion: `args`, `words`) into a setup, takes
/// the run folder's lock and ends the nodes a killed sweep of the folder left running; -1 to
/// go on, else the exit status (after --list, or 2 with the reason printed: also when another
/// sweep holds the folder).
int prepare_sweep(const CLI::App& app, const program::flags& f, const std::vector<std::string>& args,
                  const std::vector<char*>& words, sweep_setup& out);

class sweep {
public:
  explicit sweep(sweep_setup setup);
  ~sweep();
  sweep(const sweep&) = delete;
  sweep& operator=(const sweep&) = delete;

  /// Starts every part in order; "" or why the sweep cannot run.
  std::string start();

  /// Runs the sweep to its end, or to a stop by signal; prints the scores (and after a stop
  /// the resume command) and returns the exit status: 0, 1 (the sweep failed, or a write of
  /// its records did: the last line on stderr names the files), 130 (SIGINT) or 143 (SIGTERM).
  int run();

  /// Stops what start() started, in reverse order. Called by the destructor too.
  void stop();

private:
  void start_console();
  void start_reporter();
  std::string start_evaluators();
  void start_generator();
  void start_coordinator();
  /// The device kind of the sweep's slots ("cpu" or "cuda"), which the work is estimated for.
  std::string slot_device() const;
  /// Stop dispatching (first signal), then stop at once (second signal or grace over).
  void watch_signals(const std::atomic<bool>& done);
  void halt();

  sweep_setup setup_;
  std::shared_ptr<progress_board> board_;
  std::unique_ptr<console> console_;
  std::unique_ptr<caf::actor_system_config> sys_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  local_node local_;
  cluster nodes_;
  /// The evaluators the coordinator sees: each slot behind its watch, which tells the board.
  std::vector<evaluator_actor> evaluators_;
  program::generative_backend generative_;
  generator_actor generator_;
  reporter_actor reporter_;
  coordinator_actor coordinator_;
  /// What start() did, undone by stop() from the back.
  std::vector<std::function<void()>> stops_;
};

} // namespace bb
