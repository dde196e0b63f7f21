#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/compile_pool.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A native kernel the compiler rejects at its first line: a build that takes no time.
artefact failing_kernel() {
  artefact a;
  a.kind = kernel_kind::cpp;
  a.entry = "relu__default_kernel_impl";
  a.source = "#error this kernel does not build\n";
  a.hash = "failing-kernel";
  return a;
}

std::vector<compile_outcome> answers(caf::scoped_actor& self, size_t n) {
  std::vector<compile_outcome> out;
  for (size_t i = 0; i < n; ++i)
    self->receive([&](compile_outcome& o) { out.push_back(o); },
                  caf::after(std::chrono::seconds(60)) >> [&] { FAIL("the compile pool did not answer"); });
  return out;
}

} // namespace

TEST_CASE("requests for a kernel already queued or building share its one build", "[actors]") {
  test::temp_dir dir;
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  compile_pool_config pcfg;
  pcfg.build.tools = default_toolchain();
  pcfg.build.tools.use_pch = false;
  pcfg.build.cache_dir = dir / "cache";
  pcfg.build.log_dir = dir / "logs";
  pcfg.workers = 1;
  auto pool = sys.spawn(compile_pool, pcfg);
  caf::scoped_actor self{sys};
  // Three shards of one kernel version ask at once: one build answers them all.
  for (int i = 0; i < 3; ++i)
    self->send(pool, atom::compile_v, failing_kernel());
  auto together = answers(self, 3);
  REQUIRE(together.size() == 3);
  for (auto& o : together) {
    CHECK(o.status == outcome::compile_failed);
    CHECK_THAT(o.message, Catch::Contains("does not build"));
    CHECK(o.seconds == together[0].seconds);
  }
  // Asked again once that build is over, it is built again (a failed build is not cached).
  self->send(pool, atom::compile_v, failing_kernel());
  auto later = answers(self, 1);
  REQUIRE(later.size() == 1);
  CHECK(later[0].status == outcome::compile_failed);
  CHECK(later[0].seconds != together[0].seconds);
  self->send_exit(pool, caf::exit_reason::user_shutdown);
}
