#include "actors/evaluator.hpp"

#include <filesystem>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/results.hpp"
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
  if (cfg.job_timeout_s <= 0 || cfg.start_timeout_s <= 0)
    return bad("timeouts must be positive");
  if (cfg.log_dir.empty())
    return bad("no log folder for runner output");
  return {};
}

namespace {

runner_spec spec_of(const evaluator_config& cfg) {
  runner_spec spec;
  spec.program = cfg.runner;
  spec.args = {"--device", cfg.device, "--node", cfg.node, "--cpu-warmup",
               std::to_string(cfg.cpu_warmup), "--cpu-runs", std::to_string(cfg.cpu_runs),
               "--cpu-max-seconds", std::to_string(cfg.cpu_max_seconds)};
  spec.log_path = cfg.log_dir + "/runner_" + cfg.node + "_slot" + std::to_string(cfg.slot) + ".log";
  // Each runner sees only its own GPU, as device 0.
  if (cfg.device == "cuda")
    spec.env.push_back("CUDA_VISIBLE_DEVICES=" + cfg.gpu);
  return spec;
}

// Starts a runner if none runs; returns an empty string or why it could not.
std::string ensure_runner(evaluator_state& st) {
  if (st.runner.running())
    return "";
  auto err = st.runner.start(spec_of(st.cfg), static_cast<int>(st.cfg.start_timeout_s * 1000));
  if (err.empty() && st.jobs > 0)
    ++st.restarts;
  return err;
}

} // namespace

evaluator_actor::behavior_type evaluator(evaluator_pointer self, evaluator_config cfg) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return evaluator_actor::behavior_type::make_empty_behavior();
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.log_dir, ec);
  self->state.cfg = std::move(cfg);
  return {
    [=](atom::evaluate, const eval_job& job) -> eval_result {
      auto& st = self->state;
      auto tag = st.cfg.node + "/" + std::to_string(st.cfg.slot);
      if (auto err = ensure_runner(st); !err.empty()) {
        spdlog::error("evaluator {}: {}", tag, err);
        return failed_result(job, outcome::infra_error, err);
      }
      ++st.jobs;
      spdlog::debug("evaluator {}: job {} ({}) attempt {} started", tag, job.job_id, job.op_name,
                    job.attempt);
      auto call = st.runner.evaluate(job, static_cast<int>(st.cfg.job_timeout_s * 1000));
      if (call.ok)
        return std::move(call.result);
      spdlog::warn("evaluator {}: job {} ({}) {}: {}; starting a fresh runner", tag, job.job_id,
                   job.op_name, to_string(call.why), call.detail);
      auto result = failed_result(job, call.why, call.detail);
      result.where = st.runner.where();
      result.where.artefact_hash = job.kernel.hash;
      // Have the next runner ready before the next job arrives.
      if (auto err = ensure_runner(st); !err.empty())
        spdlog::error("evaluator {}: {}", tag, err);
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
