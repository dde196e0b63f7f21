#pragma once

#include <deque>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "artefacts/compiler.hpp"
#include "messages/types.hpp"

namespace bb {

struct compile_pool_config {
  compile_settings build;
  /// Compiler workers; each runs one compiler process at a time.
  size_t workers = 1;
};

caf::error validate(const compile_pool_config& cfg);

/// Workers to use by default: the node's cores minus its evaluators, at least one.
size_t default_compile_workers(size_t evaluators);

struct compile_pool_state {
  static inline const char* name = "compile_pool";
  struct pending {
    artefact kernel;
    caf::typed_response_promise<compile_outcome> promise;
  };
  compile_pool_config cfg;
  std::vector<compile_pool_actor> idle;
  std::deque<pending> queue;
  uint64_t built = 0;
  uint64_t cached = 0;
  uint64_t failed = 0;
};

using compile_pool_pointer = compile_pool_actor::stateful_pointer<compile_pool_state>;

/// Queues compile requests and hands them to detached workers as they become free, so that
/// compiles run ahead of evaluation on the cores the evaluators leave.
compile_pool_actor::behavior_type compile_pool(compile_pool_pointer self, compile_pool_config cfg);

} // namespace bb
