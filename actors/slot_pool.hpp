#pragma once

// The slots of `bbcluster serve`, shared by many requests of many clients (docs/serving.md,
// "Fair share and limits"). Each request runs as a sweep of its own (a coordinator, a
// generator of its kernels, a reporter writing its folder) whose evaluators are stand-ins
// (`pool_slot`) asking this pool; the pool keeps one queue per client and gives a free slot
// the next job of the next client in turn, so one client's thousand jobs do not hold up
// another's ten.

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "messages/types.hpp"

namespace bb {

struct slot_pool_state {
  static inline const char* name = "slot_pool";
  struct entry {
    std::string request;
    eval_job job;
    caf::typed_response_promise<eval_result> promise;
  };
  std::vector<evaluator_actor> idle;
  /// Each busy slot's job, with its client and request.
  std::map<caf::actor_addr, entry> busy;
  std::map<caf::actor_addr, std::string> busy_client;
  /// Requests cancelled lately, (client, request), oldest first: a job of one that arrives
  /// after its cancel (the request's coordinator had sent it meanwhile) is answered at once.
  /// The last max_cancelled are kept: a request's jobs arrive within moments of its cancel.
  std::deque<std::pair<std::string, std::string>> cancelled;
  std::set<std::pair<std::string, std::string>> cancelled_set;
  static constexpr size_t max_cancelled = 10000;
  size_t slots = 0;
  /// Queued jobs per client, oldest first.
  std::map<std::string, std::deque<entry>> queues;
  /// The client served last: the next job is the next client's after it (by name, wrapping).
  std::string last_client;
  /// Bound on one evaluation; past it the slot counts as lost.
  caf::timespan evaluate_timeout = std::chrono::hours(1);
  /// With no slot left, jobs wait (nodes may come back: --nodes) instead of failing.
  bool wait_for_slots = false;
  uint64_t dispatched = 0;
};

using slot_pool_pointer = slot_pool_actor::stateful_pointer<slot_pool_state>;

/// The pool over `evaluators` (each a real slot, local or on a node).
slot_pool_actor::behavior_type slot_pool(slot_pool_pointer self, std::vector<evaluator_actor> evaluators,
                                         caf::timespan evaluate_timeout, bool wait_for_slots);

/// The client whose job a free slot takes next: the first after `last` (by name, wrapping
/// around) with a queued job; "" when none has one.
std::string next_client(const std::map<std::string, size_t>& queued, const std::string& last);

/// What a node link tells its coordinator when the node comes back (its fresh slots), told
/// to the pool instead: the links of `bbcluster serve --nodes` take this as their coordinator.
coordinator_actor::behavior_type rejoin_to_pool(coordinator_actor::pointer self, slot_pool_actor pool);

/// An evaluator to one request's coordinator that asks the pool for a slot for every job, as
/// (client, request).
evaluator_actor::behavior_type pool_slot(evaluator_actor::pointer self, slot_pool_actor pool,
                                         std::string client, std::string request);

} // namespace bb
