#pragma once

// The kernel_agent backend's client: runs KernelAgent (the Python package
// triton_kernel_agent) for one operator through the adapter process bbcluster ships
// (python/bbcluster_kernel_agent.py), one process per version, with a timeout, retries
// with backoff after a crash or a hang, and the agent's output in agent_logs/. Blocking:
// call it from a detached actor.

#include <cstdint>
#include <functional>
#include <string>

#include "messages/authoring.hpp"

namespace bb {

struct kernel_agent_config {
  /// The Python that has triton_kernel_agent (and torch).
  std::string python;
  /// The adapter script; empty: bbcluster_kernel_agent.py beside the program.
  std::string adapter;
  uint32_t workers = 4;
  uint32_t max_rounds = 10;
  /// One agent run for one operator.
  double timeout_s = 3600.0;
  /// Retries after a crashed or hung agent (so max_retries + 1 runs).
  uint32_t max_retries = 2;
  double backoff_s = 10.0;
};

/// The adapter beside the running program.
std::string default_adapter_path();

/// "" when `cfg.python` can import triton_kernel_agent, else what is missing and how to
/// install it.
std::string check_kernel_agent(const kernel_agent_config& cfg);

/// Runs the agent for one version of one operator: problem description and test code from
/// the suite, the log in `<log_dir>/<folder>_v<N>.log`, the session folder in the reply.
author_reply run_kernel_agent(const kernel_agent_config& cfg, const author_request& req,
                              const std::function<void(double)>& sleep);

} // namespace bb
