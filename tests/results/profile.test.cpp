#include <catch2/catch.hpp>

#include "results/profile.hpp"

using namespace bb;

TEST_CASE("the profile table names profile.json only when it was written", "[results]") {
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

TEST_CASE("the profile shows the reporter's CPU per result, with or without job phases",
          "[results]") {
  sweep_profile p;
  p.reporter = {0.5, 250, 7, 0.25};
  CHECK(format_profile(p, "") == "reporter: 0.50 s CPU for 250 results (2.00 ms each), 7 rewrites "
                                 "of the growing reports (0.25 s)\n");
  auto j = profile_json(p)["reporter"];
  CHECK(j["cpu_seconds"] == 0.5);
  CHECK(j["results"] == 250);
  CHECK(j["cpu_ms_per_result"] == 2.0);
  CHECK(j["rewrites"] == 7);
  eval_result r;
  r.phases = {{"time_kernel", 2.0}};
  add_to_profile(p, r);
  auto text = format_profile(p, "");
  CHECK_THAT(text, Catch::StartsWith("profile: seconds per evaluator slot and phase\n"));
  CHECK_THAT(text, Catch::EndsWith("\nreporter: 0.50 s CPU for 250 results (2.00 ms each), 7 "
                                   "rewrites of the growing reports (0.25 s)\n"));
  // A thread's CPU clock runs.
  auto before = thread_cpu_seconds();
  volatile double x = 0;
  for (int i = 0; i < 3000000; ++i)
    x = x + 1.0;
  CHECK(thread_cpu_seconds() > before);
}

TEST_CASE("profile.json holds every field of the profile's records, read back as written", "[results]") {
  sweep_profile p;
  p.slots["n1/0"] = {{"time_kernel", 1.5}, {"compare", 0.25}};
  p.total = {{"time_kernel", 1.5}, {"compare", 0.25}, {"time_reference", 0.5}};
  p.jobs = 3;
  p.reporter = {0.5, 250, 7, 0.25};
  auto j = profile_json(p);
  // Every listed field is there (total under the file's name for it), with its value.
  CHECK(j["slots"]["n1/0"]["compare"] == 0.25);
  CHECK(j["total_seconds"]["time_reference"] == 0.5);
  CHECK(j["jobs"] == 3);
  CHECK(j["reporter"]["rewrite_seconds"] == 0.25);
  CHECK(j["timer_seconds"] == 2.0);
  reporter_load back = j["reporter"].get<reporter_load>();
  CHECK(back.cpu_seconds == 0.5);
  CHECK(back.results == 250);
  CHECK(back.rewrites == 7);
  CHECK(back.rewrite_seconds == 0.25);
}
