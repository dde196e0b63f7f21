#include <catch2/catch.hpp>

#include "cluster/config.hpp"
#include "messages/errors.hpp"
#include "support.hpp"

using namespace bb;

TEST_CASE("settings load over defaults", "[core]") {
  test::temp_dir dir;
  test::write_file(dir / "a.toml", "[evaluator]\ndevices = 3\njob_timeout_s = 30\n"
                                   "[timing]\ncpu_runs = 7\n");
  settings s;
  REQUIRE_FALSE(load_settings(dir / "a.toml", s));
  CHECK(s.devices == 3);
  CHECK(s.job_timeout_s == 30.0);
  CHECK(s.timing.cpu_runs == 7);
  CHECK(s.timing.cpu_warmup == 10);
  CHECK_FALSE(validate(s));
}

TEST_CASE("an unknown key names the file, line and key", "[core]") {
  test::temp_dir dir;
  test::write_file(dir / "b.toml", "[evaluator]\ndevices = 1\n\njob_timeout = 3\n");
  settings s;
  auto err = load_settings(dir / "b.toml", s);
  REQUIRE(err);
  CHECK(describe(err) == dir / "b.toml:4: unknown key 'evaluator.job_timeout'");
  CHECK(s.devices == 0); // nothing applied from a bad file
}

TEST_CASE("a wrong type names the key and both types", "[core]") {
  test::temp_dir dir;
  test::write_file(dir / "c.toml", "[timing]\ncpu_runs = \"many\"\n");
  settings s;
  auto err = load_settings(dir / "c.toml", s);
  REQUIRE(err);
  CHECK(describe(err) == dir / "c.toml:2: key 'timing.cpu_runs' must be an integer, not a string");
}

TEST_CASE("bad TOML names the line", "[core]") {
  test::temp_dir dir;
  test::write_file(dir / "d.toml", "[run]\np = = 2\n");
  settings s;
  auto err = load_settings(dir / "d.toml", s);
  REQUIRE(err);
  CHECK(describe(err).rfind(dir / "d.toml:2: ", 0) == 0);
}

TEST_CASE("the shipped default.toml sets every key and loads cleanly", "[core]") {
  settings s;
  auto err = load_settings(BB_SOURCE_DIR "/configs/default.toml", s);
  INFO(describe(err));
  REQUIRE_FALSE(err);
  CHECK_FALSE(validate(s));
  settings defaults;
  CHECK(s.job_timeout_s == defaults.job_timeout_s);
  CHECK(s.max_attempts == defaults.max_attempts);
  CHECK(s.timing.cpu_runs == defaults.timing.cpu_runs);
}

TEST_CASE("validation rejects out-of-range values", "[core]") {
  settings s;
  s.max_attempts = 0;
  CHECK(validate(s));
  s = settings{};
  s.log_level = "loud";
  CHECK(validate(s));
}
