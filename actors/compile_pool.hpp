#pragma once

#include <deque>
#include <map>
#include <string>
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
    std::string key;
  };
  compile_pool_config cfg;
  std::vector<compile_pool_actor> idle;
  std::deque<pending> queue;
  /// Who waits for each artefact queued or building (the shards of one kernel version all
  /// ask for it): one build answers them all.
  std::map<std::string, std::vector<caf::typed_response_promise<compile_outcome>>> waiting;
  uint64_t requests = 0;
  uint64_t built = 0;
  uint64_t cached = 0;
  uint64_t failed = 0;
};

using compile_pool_pointer = compile_pool_actor::stateful_pointer<compile_pool_state>;

/// Queues compile requests and hands them to detached workers as they become free, so that
/// compiles run ahead of evaluation on the cores the evaluators leave. Requests for an
/// artefact already queued or building share its one build.
compile_pool_actor::behavior_type compile_pool(compile_pool_pointer self, compile_pool_config cfg);

} // namespace bb
