#include <catch2/catch.hpp>

#include "actors/report_pace.hpp"

using namespace bb;
using namespace std::chrono_literals;

TEST_CASE("the report pace rewrites at once when due, else arms one tick for when it is",
          "[actors]") {
  report_pace pace{2s};
  report_pace::clock::time_point t0{100s};
  CHECK_FALSE(pace.due(t0));
  pace.changed();
  // Nothing rewritten yet: the first change is due at once.
  REQUIRE(pace.due(t0));
  CHECK_FALSE(pace.arm_tick(t0));
  pace.rewritten(t0, 10ms);
  CHECK_FALSE(pace.pending());
  CHECK(pace.next() == t0 + 2s);
  pace.changed();
  CHECK_FALSE(pace.due(t0 + 500ms));
  auto wait = pace.arm_tick(t0 + 500ms);
  REQUIRE(wait);
  CHECK(*wait == 1500ms);
  // One tick at a time: more changes before it ask for none.
  pace.changed();
  CHECK_FALSE(pace.arm_tick(t0 + 600ms));
  pace.ticked();
  CHECK(pace.due(t0 + 2s));
}

TEST_CASE("a slow rewrite spaces the next twenty times its duration apart", "[actors]") {
  report_pace pace{2s};
  report_pace::clock::time_point t0{100s};
  pace.changed();
  pace.rewritten(t0, 500ms);
  CHECK(pace.next() == t0 + 10s);
  pace.changed();
  CHECK_FALSE(pace.due(t0 + 9s));
  CHECK(pace.due(t0 + 10s));
  // A fast one brings the interval back.
  pace.rewritten(t0 + 10s, 1ms);
  CHECK(pace.next() == t0 + 12s);
}

TEST_CASE("an interval of zero rewrites after every change and never ticks", "[actors]") {
  report_pace pace{report_pace::clock::duration::zero()};
  report_pace::clock::time_point t0{100s};
  for (int i = 0; i < 3; ++i) {
    pace.changed();
    CHECK(pace.due(t0));
    CHECK_FALSE(pace.arm_tick(t0));
    pace.rewritten(t0, 1s);
  }
  CHECK_FALSE(pace.due(t0));
}
