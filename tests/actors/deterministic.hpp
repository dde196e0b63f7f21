#pragma once

// An actor system whose scheduler runs nothing by itself (CAF's test coordinator): actor tests
// send, then run the scheduler, then look. Actors spawned through keep() are stopped before
// the system goes.

#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include "messages/types.hpp"

namespace bb::test {

struct deterministic_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::vector<caf::actor> spawned;

  deterministic_system() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.add_message_types<caf::id_block::bb>();
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }

  ~deterministic_system() {
    for (auto& a : spawned)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    spawned.clear();
    sched->run();
  }

  /// Keeps `h` to stop it at the end; returns it.
  template <class Handle>
  Handle keep(Handle h) {
    spawned.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
};

} // namespace bb::test
