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
  CHECK(s.timing.exploit_checks == defaults.timing.exploit_checks);
  CHECK(s.timing.suspicious_speedup == defaults.timing.suspicious_speedup);
  CHECK(s.extra_inputs == defaults.extra_inputs);
}

TEST_CASE("the [checks] keys are read into the runner's options", "[core]") {
  test::temp_dir dir;
  test::write_file(dir / "checks.toml", "[checks]\nexploits = false\nsuspicious_speedup = 4\n"
                                        "extra_inputs = \"on\"\n");
  settings s;
  CHECK(s.timing.exploit_checks);
  CHECK(s.extra_inputs == "auto");
  REQUIRE_FALSE(load_settings(dir / "checks.toml", s));
  CHECK_FALSE(s.timing.exploit_checks);
  CHECK(s.timing.suspicious_speedup == 4.0);
  CHECK(s.extra_inputs == "on");
  CHECK_FALSE(validate(s));
  CHECK(runner_options_of(s).exploit_checks == false);
  CHECK(runner_options_of(s).suspicious_speedup == 4.0);
  test::write_file(dir / "never.toml", "[checks]\nsuspicious_speedup = 0.0\n");
  REQUIRE_FALSE(load_settings(dir / "never.toml", s));
  CHECK(s.timing.suspicious_speedup == 0.0);
  CHECK_FALSE(validate(s));
}

TEST_CASE("checks.extra_inputs = auto is on for the generative backends only", "[core]") {
  settings s;
  for (auto backend : {"llm", "llm-relay", "kernel_agent"})
    CHECK(extra_inputs_for(s, backend));
  for (auto backend : {"aten", "directory", "flag_gems", ""})
    CHECK_FALSE(extra_inputs_for(s, backend));
  s.extra_inputs = "on";
  CHECK(extra_inputs_for(s, "aten"));
  s.extra_inputs = "off";
  CHECK_FALSE(extra_inputs_for(s, "llm"));
}

TEST_CASE("bad [checks] values are refused, naming the key", "[core]") {
  test::temp_dir dir;
  auto loaded = [&](const std::string& text) {
    test::write_file(dir / "bad.toml", "[checks]\n" + text + "\n");
    settings s;
    if (auto err = load_settings(dir / "bad.toml", s))
      return describe(err);
    if (auto err = validate(s))
      return describe(err);
    return std::string();
  };
  for (auto text : {"suspicious_speedup = nan", "suspicious_speedup = inf",
                    "suspicious_speedup = -inf", "suspicious_speedup = -1.0"}) {
    INFO(text);
    auto err = loaded(text);
    CHECK_THAT(err, Catch::StartsWith("checks.suspicious_speedup must be a finite number >= 0"));
  }
  CHECK(loaded("suspicious_speedup = -2") == "checks.suspicious_speedup must be a finite number "
                                             ">= 0 (0: never), not -2");
  CHECK(loaded("suspicious_speedup = \"high\"")
        == dir / "bad.toml:2: key 'checks.suspicious_speedup' must be a number, not a string");
  CHECK(loaded("exploits = \"yes\"")
        == dir / "bad.toml:2: key 'checks.exploits' must be a boolean, not a string");
  CHECK(loaded("extra_inputs = true")
        == dir / "bad.toml:2: key 'checks.extra_inputs' must be a string, not a boolean");
  CHECK(loaded("extra_inputs = \"sometimes\"")
        == "checks.extra_inputs must be auto, on or off, not 'sometimes'");
  CHECK(loaded("extra_input = \"on\"") == dir / "bad.toml:2: unknown key 'checks.extra_input'");
  CHECK(loaded("extra_inputs = \"off\"").empty());
}

TEST_CASE("validation rejects out-of-range values", "[core]") {
  settings s;
  s.max_attempts = 0;
  CHECK(validate(s));
  s = settings{};
  s.log_level = "loud";
  CHECK(validate(s));
}
