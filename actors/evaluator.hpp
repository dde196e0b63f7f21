#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "artefacts/reference_cache.hpp"
#include "cluster/config.hpp"
#include "process/runner_supervisor.hpp"
#include "messages/types.hpp"

namespace bb {

struct evaluator_config {
  /// The bbrunner program.
  std::string runner;
  /// "cpu" or "cuda".
  std::string device = "cpu";
  /// Slot number on its node, for names and logs.
  uint32_t slot = 0;
  /// For cuda: the GPU this slot owns (a CUDA_VISIBLE_DEVICES entry); spawn_evaluators sets it
  /// to the slot number.
  std::string gpu;
  std::string node = "local";
  /// Folder for runner logs (kernel stdout and stderr); must exist or be creatable.
  std::string log_dir;
  double job_timeout_s = default_settings().job_timeout_s;
  /// Bound on one call of kernel or reference code (between two progress frames).
  double call_timeout_s = default_settings().call_timeout_s;
  double start_timeout_s = default_settings().start_timeout_s;
  /// Limit of a runner's private memory in bytes (0: none).
  uint64_t memory_limit_bytes = 0;
  /// Fresh runners that fail the device check in a row before the slot is taken out of
  /// service.
  uint32_t check_attempts = 3;
  /// How the runner evaluates and times (its device and node are set from this config).
  runner_options options;
  /// The node's sandbox for runners; each slot adds its scratch folder and, on a GPU, its
  /// device nodes.
  sandbox_policy sandbox;
  /// The JIT cache's store (artefacts/jit_cache.hpp), shared by the node's slots and shown
  /// read-only to their runners; "" keeps nothing between runners.
  std::string jit_cache_dir;
  /// What the store keeps for one machine (GPU, driver, torch) at most: past it, the entries
  /// used least recently go (evaluator.jit_cache_max_mb).
  uint64_t jit_cache_max_bytes = uint64_t{8192} << 20;
};

caf::error validate(const evaluator_config& cfg);

struct evaluator_state {
  static inline const char* name = "evaluator";
  evaluator_config cfg;
  runner_supervisor runner;
  /// Runners started after the first, i.e. after a fault.
  uint64_t restarts = 0;
  /// Restarts not yet reported with a result.
  uint32_t unreported_restarts = 0;
  uint64_t jobs = 0;
  /// Reference timings shared with other sweeps (options.reference_cache_dir).
  reference_cache references;
  /// When the last job ended: the time until the next one is the slot's waiting.
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  /// Whether the runner has run a job with the exploit checks off: a kernel nobody checked
  /// may have changed it, so a job with them on gets a fresh runner.
  bool unchecked_runner = false;
  /// What the last job's results were measured with (result_settings_of), for the packed
  /// settings it came with: a sweep's jobs carry the same ones, made into text once.
  std::string measured_for;
  std::map<std::string, std::string> measured_with;
};

using evaluator_pointer = evaluator_actor::stateful_pointer<evaluator_state>;

/// Spawns `n` detached evaluators from `base`, numbering their slots 0..n-1.
std::vector<evaluator_actor> spawn_evaluators(caf::actor_system& sys, const evaluator_config& base,
                                              size_t n);

/// Supervises one bbrunner: starts it, sends it jobs, and turns a crash or a timeout into a
/// terminal result before starting a fresh runner, which must pass a device check (allocate,
/// compute, synchronize) before it gets a job. A slot whose fresh runners fail the check
/// `check_attempts` times in a row is taken out of service: the evaluator quits with an
/// error, and its coordinator gives its job to other slots. Blocks on the runner: spawn it
/// detached.
evaluator_actor::behavior_type evaluator(evaluator_pointer self, evaluator_config cfg);

} // namespace bb
