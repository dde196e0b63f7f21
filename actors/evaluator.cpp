#include "actors/evaluator.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "artefacts/jit_cache.hpp"
#include "messages/input_stream.hpp"
#include "cluster/config.hpp"
#include "results/results.hpp"
#include "messages/errors.hpp"

namespace bb {

caf::error validate(const evaluator_config& cfg) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::bad_config, "evaluator " + std::to_string(cfg.slot) + ": " + why);
  };
  if (::access(cfg.runner.c_str(), X_OK) != 0)
    return bad("runner program '" + cfg.runner + "' is not executable");
  if (cfg.device != "cpu" && cfg.device != "cuda")
    return bad("device must be cpu or cuda, not '" + cfg.device + "'");
  if (cfg.job_timeout_s <= 0 || cfg.start_timeout_s <= 0 || cfg.call_timeout_s <= 0)
    return bad("timeouts must be positive");
  if (cfg.log_dir.empty())
    return bad("no log folder for runner output");
  return {};
}

namespace {

// The slot's scratch folder: its jobs' working folders go inside (a fresh one in a sandbox).
std::filesystem::path scratch_root(const evaluator_config& cfg) {
  return std::filesystem::path(cfg.log_dir).parent_path() / "scratch"
         / ("slot" + std::to_string(cfg.slot));
}

runner_spec spec_of(const evaluator_config& cfg) {
  runner_spec spec;
  spec.program = cfg.runner;
  spec.options = cfg.options;
  spec.options.device = cfg.device;
  spec.options.node = cfg.node;
  spec.log_path = cfg.log_dir + "/runner_" + cfg.node + "_slot" + std::to_string(cfg.slot) + ".log";
  // Each runner sees only its own GPU, as device 0.
  if (cfg.device == "cuda")
    spec.env.push_back("CUDA_VISIBLE_DEVICES=" + cfg.gpu);
  // Where Triton and TorchInductor compile to: in the scratch folder, which a sandbox
  // replaces with a bounded one of the runner's own. FlagGems reads its folder once per
  // process and keeps its tuning database open: one for the runner's life, seeded from the
  // store's tuning databases and kept back into them (keep_compiled).
  // TorchInductor compiles in the runner itself: a pool of compile processes left running would
  // keep its kernels out of the cache (nothing is kept while the sandbox holds another process).
  // Triton's autotuner keeps what it measured (each configuration's time, per tuning key) in
  // its cache folder, the kernel's JIT folder, only when asked: asked, a kernel's @triton.autotune
  // (FlagGems' included, outside its own tuner) does not measure again on a warm machine.
  if (!cfg.jit_cache_dir.empty()) {
    spec.env.push_back("BBCLUSTER_JIT_DIR=" + (scratch_root(cfg) / "jit").string());
    spec.env.push_back("TORCHINDUCTOR_COMPILE_THREADS=1");
    spec.env.push_back("TRITON_CACHE_AUTOTUNING=1");
  }
  spec.env.push_back("FLAGGEMS_CACHE_DIR=" + (scratch_root(cfg) / "flaggems").string());
  spec.memory_limit_bytes = cfg.memory_limit_bytes;
  spec.sandbox = cfg.sandbox;
  spec.sandbox.scratch = scratch_root(cfg).string();
  if (cfg.device == "cuda")
    spec.sandbox.devices = gpu_device_nodes(cfg.gpu);
  return spec;
}

// Starts a runner if none runs; a runner started after a fault must pass the device check
// first (`planned`: the last one was stopped for no fault of its own, and the start is no
// restart). Returns an empty string, or why no working runner could be had.
std::string ensure_runner(evaluator_state& st, bool planned = false) {
  if (st.runner.alive())
    return "";
  bool after_fault = st.jobs > 0 && !planned;
  std::string why;
  for (uint32_t i = 0; i < st.cfg.check_attempts && !new_runners_refused(); ++i) {
    // A start that failed for a passing cause (the machine short of processes or memory a
    // moment ago) is tried again after a pause that grows: 0.25 s, then 0.5 s, ...
    if (i > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min<uint32_t>(i - 1, 4)));
    why = st.runner.start(spec_of(st.cfg), static_cast<int>(st.cfg.start_timeout_s * 1000));
    if (why.empty() && after_fault)
      why = st.runner.check(static_cast<int>(st.cfg.call_timeout_s * 1000));
    if (why.empty()) {
      static std::once_flag said;
      if (auto& how = st.runner.where().sandbox; how.rfind("none", 0) == 0)
        std::call_once(said, [&] {
          spdlog::warn("evaluator {}/{}: runners run without a sandbox (evaluator.sandbox = auto): {}",
                       st.cfg.node, st.cfg.slot, how.substr(6));
        });
      if (after_fault) {
        ++st.restarts;
        ++st.unreported_restarts;
      }
      return "";
    }
    spdlog::warn("evaluator {}/{}: fresh runner {} of {} failed: {}", st.cfg.node, st.cfg.slot,
                 i + 1, st.cfg.check_attempts, why);
  }
  return why;
}

// The job's scratch folder: the runner's working folder while the job runs, removed after.
std::string scratch_for(const evaluator_config& cfg, const eval_job& job) {
  auto dir = scratch_root(cfg) / ("job" + std::to_string(job.job_id) + "_" + std::to_string(job.attempt));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return ec ? "" : dir.string();
}

// The job's kernel's entry in the JIT cache's store, "" when it has none (not a Python kernel,
// no cache, a runner without a sandbox: a kernel that can write anywhere could write to the
// store).
std::string jit_entry_of(const evaluator_state& st, const eval_job& job) {
  auto name = jit_entry_name(job.kernel.hash);
  if (st.cfg.jit_cache_dir.empty() || job.kernel.kind != kernel_kind::py || name.empty()
      || st.runner.where().sandbox != "namespaces")
    return "";
  return (std::filesystem::path(jit_store_for(st.cfg.jit_cache_dir, st.runner.where())) / name).string();
}

// This slot's folder among the FlagGems tuning store's: its node's name and slot, in letters,
// digits, '.', '-' and '_' only.
std::string tuning_feeder(const evaluator_config& cfg) {
  std::string name = cfg.node.empty() ? "local" : cfg.node;
  for (auto& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      c = '_';
  if (name.front() == '.')
    name.front() = '_';
  return name + "_slot" + std::to_string(cfg.slot);
}

// After a job that ended untampered: what its kernel compiled, from the runner's JIT folder into
// its entry in the store, and FlagGems' tuning databases. Not when a process of the sandbox outlived its job: it could have
// written into this kernel's folder.
void keep_compiled(evaluator_state& st, const std::string& entry, const std::string& tag) {
  if (entry.empty())
    return;
  int proc = st.runner.open_sandbox_proc();
  if (proc < 0 || !st.runner.sandbox_holds_only_runner()) {
    if (proc >= 0)
      ::close(proc);
    spdlog::debug("evaluator {}: nothing kept in the JIT cache: the sandbox holds other processes", tag);
    return;
  }
  // The sandbox's files through the descriptor: its first process's, even if its number is
  // taken by another process meanwhile. The scratch folder without links on the host's side:
  // the walk follows none.
  std::error_code ec;
  auto scratch = std::filesystem::weakly_canonical(scratch_root(st.cfg), ec);
  if (ec)
    scratch = scratch_root(st.cfg);
  auto from = scratch / "jit" / std::filesystem::path(entry).filename();
  auto root = "/proc/self/fd/" + std::to_string(proc) + "/root";
  auto kept = harvest_jit_cache(root, from.string(), entry);
  // FlagGems' tuning databases, into this slot's folder of the store's (the runner merges all of
  // them into its own before its first Python kernel loads).
  auto tuning = harvest_tuning(root, (scratch / "flaggems" / "config_cache").string(),
                               (std::filesystem::path(entry).parent_path() / flag_gems_tuning_folder
                                / tuning_feeder(st.cfg))
                                 .string());
  ::close(proc);
  if (tuning.files > 0)
    spdlog::debug("evaluator {}: kept FlagGems' tuning ({} files, {} bytes)", tag, tuning.files, tuning.bytes);
  if (!tuning.stopped.empty())
    spdlog::warn("evaluator {}: FlagGems' tuning is not kept: {}", tag, tuning.stopped);
  if (kept.files > 0)
    spdlog::debug("evaluator {}: kept {} compiled files ({} bytes) in {}", tag, kept.files, kept.bytes, entry);
  if (!kept.stopped.empty())
    spdlog::warn("evaluator {}: the JIT cache keeps no more of this kernel: {}", tag, kept.stopped);
  if (kept.files == 0)
    return;
  // The store grew: the kernels used least recently make room (a campaign adds one a version).
  auto store = std::filesystem::path(entry).parent_path().string();
  auto trimmed = trim_jit_store(store, st.cfg.jit_cache_max_bytes, entry);
  if (trimmed.entries > 0)
    spdlog::info("evaluator {}: the JIT cache dropped {} kernels' entries used least recently ({} MiB) to stay "
                 "under evaluator.jit_cache_max_mb = {}",
                 tag, trimmed.entries, trimmed.bytes >> 20, st.cfg.jit_cache_max_bytes >> 20);
}

} // namespace

namespace {

// Runs `job` on the slot's runner until it ends: an input whose reference runs past the call
// timeout is left out (reference_error) and the job runs again on a fresh runner without it.
runner_supervisor::call_outcome run_on_runner(evaluator_state& st, eval_job& job, const std::string& tag,
                                              const std::string& jit_entry) {
  auto scratch = scratch_for(st.cfg, job);
  // A served request's inputs stream to its server as they end (messages/input_stream.hpp).
  // A job run again without an input whose reference hung streams each input once.
  std::function<void(const runner_reply&)> on_input;
  std::set<std::pair<bool, uint32_t>> streamed; // (a correctness record, its index)
  if (!job.stream_tag.empty())
    on_input = [&job, &streamed](const runner_reply& reply) {
      auto records = reply.result;
      for (auto& p : records.performance)
        p.reference_round_means_ms.clear(); // the cache's, not the reports'
      bool checked = !records.correctness.empty();
      auto index = (checked ? job.shard.correctness_begin : job.shard.performance_begin) + reply.input_index;
      if (streamed.insert({checked, index}).second)
        publish_input(job.stream_tag, records, index);
    };
  runner_supervisor::call_outcome call;
  for (size_t tries = 0;; ++tries) {
    call = st.runner.evaluate(job, static_cast<int>(st.cfg.call_timeout_s * 1000),
                              static_cast<int>(st.cfg.job_timeout_s * 1000), scratch, jit_entry, on_input);
    if (call.ok || call.why != outcome::reference_error
        || tries > job.correctness_inputs.size() + job.performance_inputs.size())
      break;
    spdlog::warn("evaluator {}: job {} ({}): {}; leaving that input out", tag, job.job_id,
                 job.op_name, call.failed_input.message);
    job.reference_failures.push_back(call.failed_input);
    if (auto err = ensure_runner(st); !err.empty()) {
      call.why = outcome::infra_error;
      call.detail = "no runner after a reference timeout: " + err;
      break;
    }
  }
  std::error_code ec;
  if (!scratch.empty())
    std::filesystem::remove_all(scratch, ec);
  return call;
}

// A reference_error whose reference failed to run (raised, ran out of memory, timed out) rather
// than disagreed with itself.
bool failed_to_run(const std::string& message) {
  return message.rfind(reference_disagrees_text, 0) != 0;
}

// A reference failure is believed only where the kernel never ran. A kernel loaded in the
// runner's process can make the reference fail there (memory it holds, limits it set), and an
// input whose reference fails is left out of the scores: a kernel wrong or slow on an input
// would have it left out. So the inputs whose reference failed to run (raised, ran out of
// memory; not one that disagreed with itself, and not one whose reference ran past the call
// timeout, which load alone can cause) run again, the reference against itself, in a fresh
// runner; each whose reference runs there fails the kernel's input instead
// (`starves_reference`). Returns whether the runner was replaced.
bool confirm_reference_failures(evaluator_state& st, const eval_job& job, eval_result& result,
                                const std::string& tag) {
  static const std::string prefix = std::string(to_string(outcome::reference_error)) + ": ";
  if (job.kernel.kind == kernel_kind::aten || result.correctness.size() != job.correctness_inputs.size()
      || result.performance.size() != job.performance_inputs.size())
    return false;
  auto timed_out = [&](input_kind kind, size_t i) {
    return std::any_of(job.reference_failures.begin(), job.reference_failures.end(),
                       [&](const input_failure& f) { return f.kind == kind && f.index == i; });
  };
  std::vector<size_t> checked, timed; // the suspects among the records, by index
  for (size_t i = 0; i < result.correctness.size(); ++i)
    if (auto& c = result.correctness[i]; c.error_type == to_string(outcome::reference_error)
                                         && failed_to_run(c.error_msg) && !timed_out(input_kind::correctness, i))
      checked.push_back(i);
  for (size_t i = 0; i < result.performance.size(); ++i)
    if (auto& p = result.performance[i]; p.error_msg.rfind(prefix, 0) == 0
                                         && failed_to_run(p.error_msg.substr(prefix.size()))
                                         && !timed_out(input_kind::performance, i))
      timed.push_back(i);
  if (checked.empty() && timed.empty())
    return false;
  std::vector<std::string> inputs;
  auto add = [&](const std::string& text) {
    if (std::find(inputs.begin(), inputs.end(), text) == inputs.end())
      inputs.push_back(text);
  };
  for (auto i : checked)
    add(job.correctness_inputs[i]);
  for (auto i : timed)
    add(job.performance_inputs[i]);
  auto started = std::chrono::steady_clock::now();
  struct count_phase {
    eval_result& result;
    std::chrono::steady_clock::time_point started;
    ~count_phase() {
      result.phases["confirm_reference"] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
  } counted{result, started};
  eval_job alone;
  alone.job_id = job.job_id;
  alone.attempt = job.attempt;
  alone.op_name = job.op_name;
  alone.kernel = {kernel_kind::aten, "", "", "aten", "", "", ""};
  alone.correctness_inputs = inputs;
  alone.settings = job.settings;
  st.runner.stop(); // with whatever the kernel holds
  if (auto err = ensure_runner(st, true); !err.empty()) {
    spdlog::warn("evaluator {}: job {} ({}): the reference's failures could not be confirmed without the kernel "
                 "(no runner: {}); left out", tag, job.job_id, job.op_name, err);
    return true;
  }
  // A reference that runs past the call timeout here too is left out of this job, as in any.
  auto call = run_on_runner(st, alone, tag, "");
  if (!call.ok) {
    // The reference fails without the kernel too (a crash): its failures stand.
    st.runner.stop();
    return true;
  }
  // The reference ran there unless its record is again a failure to run.
  std::set<std::string> runs;
  for (size_t i = 0; i < inputs.size() && i < call.result.correctness.size(); ++i) {
    auto& c = call.result.correctness[i];
    if (!(c.error_type == to_string(outcome::reference_error) && failed_to_run(c.error_msg)))
      runs.insert(inputs[i]);
  }
  if (runs.empty())
    return true;
  auto why = [](const std::string& failure) {
    return "the reference failed on this input after the kernel had loaded (" + failure
           + "), and ran in a fresh runner where the kernel never had";
  };
  for (auto i : checked)
    if (runs.count(job.correctness_inputs[i])) {
      auto& c = result.correctness[i];
      c.is_correct = false;
      c.error_type = "starves_reference";
      c.error_msg = why(c.error_msg);
    }
  for (auto i : timed)
    if (runs.count(job.performance_inputs[i])) {
      auto& p = result.performance[i];
      p.successfully_ran = false;
      p.error_msg = "starves_reference: " + why(p.error_msg.substr(prefix.size()));
    }
  if (std::find(result.flags.begin(), result.flags.end(), "starves_reference") == result.flags.end())
    result.flags.push_back("starves_reference");
  // A served request's client had these inputs streamed as left out: it gets them again.
  if (!job.stream_tag.empty()) {
    auto publish = [&](auto fill, uint32_t index) {
      eval_result records;
      records.job_id = job.job_id;
      records.attempt = job.attempt;
      records.op_name = job.op_name;
      fill(records);
      publish_input(job.stream_tag, records, index);
    };
    for (auto i : checked)
      if (runs.count(job.correctness_inputs[i]))
        publish([&](eval_result& r) { r.correctness = {result.correctness[i]}; },
                job.shard.correctness_begin + static_cast<uint32_t>(i));
    for (auto i : timed)
      if (runs.count(job.performance_inputs[i]))
        publish([&](eval_result& r) { r.performance = {result.performance[i]}; },
                job.shard.performance_begin + static_cast<uint32_t>(i));
  }
  spdlog::warn("evaluator {}: job {} ({}): the reference failed on {} input(s) only where the kernel had loaded "
               "(starves_reference)", tag, job.job_id, job.op_name, runs.size());
  return true;
}

} // namespace

evaluator_actor::behavior_type evaluator(evaluator_pointer self, evaluator_config cfg) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return evaluator_actor::behavior_type::make_empty_behavior();
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.log_dir, ec);
  // Absolute: the sandbox mounts the scratch folder by path, and the runner resolves its
  // jobs' folders from inside it.
  cfg.log_dir = std::filesystem::absolute(cfg.log_dir, ec).lexically_normal().string();
  self->state.references = reference_cache(cfg.options.reference_cache_dir);
  std::filesystem::create_directories(scratch_root(cfg), ec); // a sandbox mounts its own there
  self->state.cfg = std::move(cfg);
  return {
    [=](atom::evaluate, eval_job job) -> caf::result<eval_result> {
      using clock = std::chrono::steady_clock;
      auto& st = self->state;
      auto arrived = clock::now();
      double waiting = std::chrono::duration<double>(arrived - st.idle_since).count();
      auto tag = st.cfg.node + "/" + std::to_string(st.cfg.slot);
      // How to time and check: the sweep's settings the job carries; where: this slot's.
      runner_options options;
      try {
        options = job_options(st.cfg.options, job.settings);
      } catch (const std::exception& e) {
        return failed_result(job, outcome::infra_error,
                             std::string("the job's settings could not be read (another bbcluster version?): ") + e.what());
      }
      // A runner that ran kernels nobody checked is not trusted with a checked job.
      if (options.exploit_checks && st.unchecked_runner) {
        st.runner.stop();
        st.unchecked_runner = false;
      }
      if (auto err = ensure_runner(st); !err.empty()) {
        // This slot cannot run anything: out of service. Quitting makes the coordinator
        // give the job to another slot.
        spdlog::error("evaluator {}: taken out of service: {}", tag, err);
        auto down = make_error(errc::runner_failed, "evaluator " + tag + " out of service: " + err);
        self->quit(down);
        return down;
      }
      auto started = clock::now();
      ++st.jobs;
      spdlog::debug("evaluator {}: job {} ({}) attempt {} started", tag, job.job_id, job.op_name,
                    job.attempt);
      st.unchecked_runner = st.unchecked_runner || !options.exploit_checks;
      // A sweep without the reference cache neither reads nor writes this slot's.
      static const reference_cache no_cache;
      const auto& references = options.reference_cache ? st.references : no_cache;
      attach_cached_references(job, references, st.runner.where(), options);
      auto jit_entry = jit_entry_of(st, job);
      if (!jit_entry.empty())
        touch_jit_entry(jit_entry); // used now: the last to be trimmed
      auto call = run_on_runner(st, job, tag, jit_entry);
      auto result = call.ok ? std::move(call.result) : failed_result(job, call.why, call.detail);
      bool replaced = call.ok && options.exploit_checks && confirm_reference_failures(st, job, result, tag);
      keep_measured_references(result, job, references, options);
      result.runner_restarts = std::exchange(st.unreported_restarts, 0);
      auto ended = clock::now();
      result.phases["waiting"] += waiting;
      result.phases["runner_start"] += std::chrono::duration<double>(started - arrived).count();
      double evaluated = std::chrono::duration<double>(ended - started).count();
      if (call.ok)
        result.phases["moving_results"] +=
          std::max(0.0, evaluated - result.wall_seconds
                          - (result.phases.count("confirm_reference") ? result.phases.at("confirm_reference") : 0.0));
      st.idle_since = ended;
      if (st.measured_with.empty() || st.measured_for != job.settings) {
        st.measured_for = job.settings;
        st.measured_with = result_settings_of(options, st.cfg.job_timeout_s, st.cfg.call_timeout_s);
      }
      if (call.ok) {
        result.where.slot = st.cfg.slot;
        result.where.settings = st.measured_with;
        // A runner that lost its CUDA context, or whose process a kernel tampered with (its
        // Python, the dispatcher, a setting, a thread left running), exits after its result:
        // the next job gets a fresh one.
        // (A kernel that starved the reference had its runner replaced already.)
        static const char* spoiling[] = {"replaces_timer", "replaces_comparison", "replaces_operator", "patches_code",
                                         "changes_dispatch", "changes_global_state",
                                         "leaves_thread_running", "starves_reference"};
        auto& flags = result.flags;
        bool tampered = std::any_of(std::begin(spoiling), std::end(spoiling), [&](const char* f) {
          return std::find(flags.begin(), flags.end(), f) != flags.end();
        });
        if (spoils_runner(result) || tampered) {
          if (!replaced)
            st.runner.stop();
        } else if (options.exploit_checks && !replaced) {
          // Without the checks a thread left behind goes unseen; a replaced runner's sandbox is
          // not the one the kernel compiled in.
          keep_compiled(st, jit_entry, tag);
        }
        return result;
      }
      spdlog::warn("evaluator {}: job {} ({}) {}: {}; starting a fresh runner", tag, job.job_id,
                   job.op_name, to_string(call.why), call.detail);
      result.where = st.runner.where();
      result.where.artefact_hash = job.kernel.hash;
      result.where.slot = st.cfg.slot;
      result.where.settings = st.measured_with;
      return result;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

} // namespace bb

namespace bb {

std::vector<evaluator_actor> spawn_evaluators(caf::actor_system& sys, const evaluator_config& base,
                                              size_t n) {
  std::vector<evaluator_actor> out;
  for (size_t i = 0; i < n; ++i) {
    auto cfg = base;
    cfg.slot = static_cast<uint32_t>(i);
    if (cfg.gpu.empty())
      cfg.gpu = std::to_string(i);
    out.push_back(sys.spawn<caf::detached>(evaluator, std::move(cfg)));
  }
  return out;
}

} // namespace bb
