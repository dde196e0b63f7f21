#include <catch2/catch.hpp>

#include "results/profile.hpp"

using namespace bb;

TEST_CASE("the profile table names profile.json only when it was written", "[core]") {
  eval_result r;
  r.where.node = "local";
  r.phases = {{"runner_start", 0.5}, {"time_kernel", 2.0}};
  auto p = make_profile({r});
  auto kept = format_profile(p, "profile.json");
  CHECK_THAT(kept, Catch::StartsWith("profile: seconds per evaluator slot and phase (profile.json "
                                     "has them all)\n"));
  auto not_kept = format_profile(p, "");
  CHECK_THAT(not_kept, Catch::StartsWith("profile: seconds per evaluator slot and phase\n"));
  CHECK(not_kept.find("profile.json") == std::string::npos);
  CHECK(not_kept.find("local/0") != std::string::npos);
}
