#pragma once

// The kernel_agent backend's client: runs KernelAgent (the Python package
// triton_kernel_agent) for one operator through the adapter process bbcluster ships
// (python/bbcluster_kernel_agent.py), one process per version, with a timeout, retries
// with backoff after a crash or a hang, and the agent's output in agent_logs/. Blocking:
// call it from a detached actor.

#include <cstdint>
#include <functional>
#include <string>

#include "cluster/config.hpp"
#include "generate/generation.hpp"
#include "messages/authoring.hpp"

namespace bb {

struct kernel_agent_config {
  /// The Python that has triton_kernel_agent (and torch).
  std::string python;
  /// The adapter script; empty: bbcluster_kernel_agent.py beside the program.
  std::string adapter;
  uint32_t workers = static_cast<uint32_t>(default_settings().ka_workers);
  uint32_t max_rounds = static_cast<uint32_t>(default_settings().ka_max_rounds);
  /// One agent run for one operator.
  double timeout_s = default_settings().ka_timeout_s;
  /// Retries after a crashed or hung agent (so max_retries + 1 runs); a configuration error
  /// (no provider for the model) is final.
  uint32_t max_retries = static_cast<uint32_t>(default_settings().ka_max_retries);
  double backoff_s = default_settings().ka_backoff_s;
  /// KernelAgent's model_name (--llm-model); "": $OPENAI_MODEL, else KernelAgent's default.
  std::string model;
  /// The provider KernelAgent must use (--llm-provider): "relay", "openai" or "anthropic";
  /// "": the model's own providers, in KernelAgent's order.
  std::string provider;
  /// The provider's server (--llm-base-url), set as LLM_RELAY_URL, OPENAI_BASE_URL or
  /// ANTHROPIC_BASE_URL (all three when no provider is named); "": KernelAgent's own.
  std::string base_url;
  /// Whether KernelAgent also writes its own test and requires both to pass; without it
  /// bbcluster's test, which mirrors the evaluator, rules alone.
  bool generate_default_test = false;
  /// A served cluster that the agent's test runs send candidates to (kernel_agent.verify_with);
  /// its address "" for a test run in the agent's own worker.
  agent_service service;
};

/// What KernelAgent uses, as its check found it.
struct agent_provider {
  std::string model;
  /// KernelAgent's provider name: relay, openai, anthropic.
  std::string provider;
  std::string base_url;
};

/// The adapter beside the running program.
std::string default_adapter_path();

/// "" when `cfg.python` can import triton_kernel_agent and the agent made from `cfg` has a
/// provider for its model (then `found` says which); else what is missing and what to set.
std::string check_kernel_agent(const kernel_agent_config& cfg, agent_provider& found);

/// "" when `cfg.python` can use the Python client and the served cluster `cfg.service` names
/// evaluates the operator `op` itself (kind aten, one input) on the sweep's suite and data;
/// else what is wrong (a missing package, no answer, a refused key, data the server lacks).
std::string check_agent_service(const kernel_agent_config& cfg, const std::string& op);

/// What to do when KernelAgent has no provider, from the agent's own `reason` ("No available
/// provider for model 'm'. Tried providers: ['RelayProvider']. ...").
std::string provider_advice(const std::string& reason);

/// The last round of an agent session that found no kernel, from its
/// workers/worker_<N>/round_<M>.json: where it was, the line that says what failed, and the
/// round's output (its end, at most 1500 characters). Empty `where` when there is none.
struct round_failure {
  /// "worker 1, round 3".
  std::string where;
  std::string line;
  std::string output;
};
round_failure last_round_failure(const std::string& session_dir);

/// Runs the agent for one version of one operator: problem description and test code from
/// the suite (the test with the previous version's evaluation from v2 on), the agent's own
/// files in `<log_dir>/<folder>_v<N>/` and its output in `<log_dir>/<folder>_v<N>.log`, the
/// session folder in the reply.
author_reply run_kernel_agent(const kernel_agent_config& cfg, const author_request& req,
                              const std::function<void(double)>& sleep);

} // namespace bb
