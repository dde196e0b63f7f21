#pragma once

// The AUTHOR actors of the generative backends: each writes one kernel version at a time and
// blocks meanwhile (on HTTP, or on a KernelAgent process), so they are spawned detached; how
// many there are is the cap on requests (or agents) in flight.

#include <caf/typed_event_based_actor.hpp>

#include "generate/kernel_agent.hpp"
#include "generate/llm_client.hpp"
#include "messages/types.hpp"

namespace bb {

struct llm_author_state {
  static inline const char* name = "llm_author";
};

/// Asks a model over HTTP (libcurl) for each version.
author_actor::behavior_type llm_author(author_actor::stateful_pointer<llm_author_state> self,
                                       llm_config cfg);

struct kernel_agent_author_state {
  static inline const char* name = "kernel_agent_author";
};

/// Runs KernelAgent through the adapter process for each version.
author_actor::behavior_type
kernel_agent_author(author_actor::stateful_pointer<kernel_agent_author_state> self,
                    kernel_agent_config cfg);

} // namespace bb
