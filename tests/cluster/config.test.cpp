#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <toml++/toml.h>

#include "cluster/config.hpp"
#include "messages/errors.hpp"
#include "messages/runner_protocol.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A value other than `x`, of its type.
bool other_than(bool x) {
  return !x;
}
int64_t other_than(int64_t x) {
  return x + 1;
}
double other_than(double x) {
  return x + 0.5;
}
std::string other_than(const std::string& x) {
  return x + "-other";
}

} // namespace

TEST_CASE("settings load over defaults", "[cluster]") {
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

TEST_CASE("an unknown key names the file, line and key", "[cluster]") {
  test::temp_dir dir;
  test::write_file(dir / "b.toml", "[evaluator]\ndevices = 1\n\njob_timeout = 3\n");
  settings s;
  auto err = load_settings(dir / "b.toml", s);
  REQUIRE(err);
  CHECK(describe(err) == dir / "b.toml:4:1: unknown key 'evaluator.job_timeout'");
  CHECK(s.devices == 0); // nothing applied from a bad file
}

TEST_CASE("a wrong type names the key and both types", "[cluster]") {
  test::temp_dir dir;
  test::write_file(dir / "c.toml", "[timing]\ncpu_runs = \"many\"\n");
  settings s;
  auto err = load_settings(dir / "c.toml", s);
  REQUIRE(err);
  CHECK(describe(err) == dir / "c.toml:2:1: key 'timing.cpu_runs' must be an integer, not a string");
}

TEST_CASE("bad TOML names the line", "[cluster]") {
  test::temp_dir dir;
  test::write_file(dir / "d.toml", "[run]\np = = 2\n");
  settings s;
  auto err = load_settings(dir / "d.toml", s);
  REQUIRE(err);
  CHECK(describe(err).rfind(dir / "d.toml:2:", 0) == 0);
  // A file that is not text: what the parser quotes of it reaches the terminal escaped.
  test::write_file(dir / "e.toml", std::string("[run]\n\x1b[2J\x01 = 1\n"));
  auto esc = describe(load_settings(dir / "e.toml", s));
  INFO(esc);
  CHECK(esc.rfind(dir / "e.toml:2:", 0) == 0);
  CHECK(std::none_of(esc.begin(), esc.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }));
}

TEST_CASE("the shipped default.toml is the one messages/settings.def makes, and loads", "[cluster]") {
  auto text = test::read_file(BB_SOURCE_DIR "/configs/default.toml");
  // Regenerate with: build/bin/bbcluster settings toml > configs/default.toml
  CHECK(text == settings_toml());
  settings s;
  s.job_timeout_s = 1;
  s.timing.rounds = 9;
  auto err = load_settings(BB_SOURCE_DIR "/configs/default.toml", s);
  INFO(describe(err));
  REQUIRE_FALSE(err);
  CHECK_FALSE(validate(s));
  // Every key is set back to its default.
  CHECK(sweep_settings_of(s) == sweep_settings_of(settings{}));
  CHECK(s.job_timeout_s == settings{}.job_timeout_s);
  // Every key load_settings knows is in the file.
  auto file = toml::parse_file(BB_SOURCE_DIR "/configs/default.toml");
  std::vector<std::string> missing;
  for (auto& name : setting_names()) {
    auto dot = name.find('.');
    auto* section = file[name.substr(0, dot)].as_table();
    if (!section || !section->contains(name.substr(dot + 1)))
      missing.push_back(name);
  }
  CHECK(missing.empty());
  CHECK(setting_names().size() > 60);
}

TEST_CASE("the README's table of settings is the one messages/settings.def makes", "[cluster]") {
  auto readme = test::read_file(BB_SOURCE_DIR "/README.md");
  auto begin = readme.find("<!-- settings table: bbcluster settings markdown -->\n");
  auto end = readme.find("<!-- end of settings table -->");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  begin = readme.find('\n', begin) + 1;
  CHECK(readme.substr(begin, end - begin) == settings_markdown());
  auto table = settings_markdown();
  for (auto& name : setting_names())
    CHECK(table.find("| `" + name + "` |") != std::string::npos);
}

TEST_CASE("each setting's documentation, scope and allowed values come from the list", "[cluster]") {
  std::map<std::string, setting_doc> docs;
  for (auto& d : setting_docs())
    docs[d.key] = d;
  REQUIRE(docs.size() == setting_names().size());
  CHECK(docs["timing.timer"].allowed == "do_bench, adaptive or cudagraph");
  CHECK(docs["timing.timer"].scope == setting_scope::sweep);
  CHECK(docs["timing.timer"].flag == "--timer");
  CHECK(docs["timing.timer"].default_text == "\"do_bench\"");
  CHECK(docs["timing.rounds"].allowed == "an integer in [1, 1000]");
  CHECK(docs["evaluator.call_timeout_s"].allowed == "a finite number of seconds in (0, 604800]");
  CHECK(docs["evaluator.call_timeout_s"].default_text == "120.0");
  CHECK(docs["evaluator.devices"].scope == setting_scope::node);
  CHECK(docs["scheduler.shards"].scope == setting_scope::coordinator);
  for (auto& [key, d] : docs) {
    INFO(key);
    CHECK((d.type == "string" || d.type == "boolean" || d.type == "integer" || d.type == "number"));
    // A number key always has a range: no NaN, infinity or 1e308 gets through.
    if (d.type == "integer" || d.type == "number")
      CHECK_FALSE(d.allowed.empty());
  }
}

TEST_CASE("set_setting, as --set, takes any key, a string unquoted too, and names a bad one", "[cluster]") {
  settings s;
  REQUIRE_FALSE(set_setting(s, "timing.timer", "adaptive", "--set"));
  CHECK(s.timing.timer == "adaptive");
  REQUIRE_FALSE(set_setting(s, "timing.rounds", "3", "--set"));
  CHECK(s.timing.rounds == 3);
  REQUIRE_FALSE(set_setting(s, "evaluator.sandbox", "\"off\"", "--set"));
  CHECK(s.sandbox == "off");
  REQUIRE_FALSE(set_setting(s, "checks.exploits", "false", "--set"));
  CHECK_FALSE(s.timing.exploit_checks);
  REQUIRE_FALSE(set_setting(s, "evaluator.call_timeout_s", "30", "--set"));
  CHECK(s.call_timeout_s == 30.0);
  CHECK(describe(set_setting(s, "timing.rounds", "three", "--set timing.rounds=three"))
        == "--set timing.rounds=three: key 'timing.rounds' must be an integer, not 'three'");
  CHECK(describe(set_setting(s, "evaluator.call_timeout_s", "nan", "--set"))
        == "--set: evaluator.call_timeout_s must be a finite number of seconds in (0, 604800], not nan");
  CHECK(describe(set_setting(s, "timing.timer", "fast", "--set"))
        == "--set: timing.timer must be do_bench, adaptive or cudagraph, not 'fast'");
  REQUIRE_FALSE(set_setting(s, "timing.timer", "cudagraph", "--set"));
  CHECK(s.timing.timer == "cudagraph");
  CHECK(describe(set_setting(s, "timing.nope", "1", "--set")).find("unknown key 'timing.nope'")
        != std::string::npos);
  // A refused value leaves the settings as they were.
  CHECK(s.timing.rounds == 3);
  CHECK(s.call_timeout_s == 30.0);
}

TEST_CASE("sweep settings travel as text and come back the same on a node", "[cluster]") {
  settings coordinator;
  coordinator.timing.timer = "adaptive";
  coordinator.timing.rounds = 3;
  coordinator.timing.reference_cache = false;
  coordinator.timing.exploit_checks = false;
  coordinator.call_timeout_s = 12.5;
  coordinator.sandbox = "off";
  coordinator.sandbox_tmp_mb = 64;
  coordinator.devices = 7;          // a node's own: not sent
  coordinator.compile_workers = 3;  // a node's own: not sent
  auto sent = sweep_settings_of(coordinator);
  CHECK(sent.count("timing.timer") == 1);
  CHECK(sent.count("evaluator.devices") == 0);
  CHECK(sent.count("compile.workers") == 0);
  CHECK(sent.count("scheduler.shards") == 0);
  settings node;
  node.devices = 2;
  REQUIRE_FALSE(apply_sweep_settings(node, sent));
  CHECK(sweep_settings_of(node) == sent);
  CHECK(settings_differences(sent, sweep_settings_of(node)).empty());
  CHECK(node.timing.timer == "adaptive");
  CHECK(node.call_timeout_s == 12.5);
  CHECK(node.sandbox == "off");
  CHECK(node.devices == 2);
  CHECK(node.compile_workers == settings{}.compile_workers);
  // What a node cannot take is refused whole, naming the key.
  auto bad = sent;
  bad["timing.timer"] = "\"graphs\"";
  CHECK(describe(apply_sweep_settings(node, {{"evaluator.devices", "4"}}))
        == "evaluator.devices is a node setting, which a coordinator does not send");
  CHECK(describe(apply_sweep_settings(node, bad)) == "timing.timer must be do_bench, adaptive or cudagraph, not 'graphs'");
  CHECK(node.timing.timer == "adaptive");
  auto applied = sent;
  applied["timing.rounds"] = "5";
  applied.erase("timing.timer");
  auto diff = settings_differences(sent, applied);
  REQUIRE(diff.size() == 2);
  CHECK(diff[0] == "timing.rounds: sent 3, applied 5");
  CHECK(diff[1] == "timing.timer: sent \"adaptive\", not applied");
}

TEST_CASE("every runner setting of the list crosses the runner's wire", "[cluster]") {
  // Each runner setting set away from its default, packed and unpacked: a member the msgpack
  // map leaves out comes back as its default.
  runner_options changed;
#define BB_SETTING(...)
#define BB_RUNNER_SETTING(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)                    \
  changed.MEMBER = other_than(changed.MEMBER);
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
  auto back = unpack<runner_options>(pack(changed));
#define BB_SETTING(...)
#define BB_RUNNER_SETTING(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)                    \
  CHECK(back.MEMBER == changed.MEMBER);                                                          \
  CHECK(back.MEMBER != runner_options{}.MEMBER);
#include "messages/settings.def"
#undef BB_SETTING
#undef BB_RUNNER_SETTING
}

TEST_CASE("the checks section's keys are read into the runner's options", "[cluster]") {
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

TEST_CASE("checks.extra_inputs = auto is on for the generative backends only", "[cluster]") {
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

TEST_CASE("bad values in the checks section are refused, naming the key", "[cluster]") {
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
    CHECK_THAT(err, Catch::StartsWith(dir / "bad.toml:2:1: checks.suspicious_speedup must be a "
                                            "finite number in [0, 1000000] (0: never), not "));
  }
  CHECK(loaded("suspicious_speedup = -2") == dir / "bad.toml:2:1: checks.suspicious_speedup "
                                                   "must be a finite number in [0, 1000000] "
                                                   "(0: never), not -2");
  CHECK(loaded("suspicious_speedup = \"high\"")
        == dir / "bad.toml:2:1: key 'checks.suspicious_speedup' must be a number, not a string");
  CHECK(loaded("exploits = \"yes\"")
        == dir / "bad.toml:2:1: key 'checks.exploits' must be a boolean, not a string");
  CHECK(loaded("extra_inputs = true")
        == dir / "bad.toml:2:1: key 'checks.extra_inputs' must be a string, not a boolean");
  // A choice, too, is refused where the file sets it.
  CHECK(loaded("extra_inputs = \"sometimes\"")
        == dir / "bad.toml:2:1: checks.extra_inputs must be auto, on or off, not 'sometimes'");
  CHECK(loaded("extra_input = \"on\"") == dir / "bad.toml:2:1: unknown key 'checks.extra_input'");
  CHECK(loaded("extra_inputs = \"off\"").empty());
}

TEST_CASE("validation rejects out-of-range values", "[cluster]") {
  settings s;
  s.max_attempts = 0;
  CHECK(validate(s));
  s = settings{};
  s.log_level = "loud";
  CHECK(validate(s));
}

TEST_CASE("a number out of range names the file, line, column and key", "[cluster]") {
  test::temp_dir dir;
  auto loaded = [&](const std::string& text) {
    test::write_file(dir / "settings.toml", "[run]\np = 2.0\n[evaluator]\n" + text + "\n");
    settings s;
    auto err = load_settings(dir / "settings.toml", s);
    if (!err)
      return std::string();
    CHECK(s.p == settings{}.p); // nothing applied from a bad file
    return describe(err);
  };
  auto call_timeout = [&](const std::string& value) {
    return dir / "settings.toml:4:1: evaluator.call_timeout_s must be a finite number of seconds "
                 "in (0, 604800], not " + value;
  };
  CHECK(loaded("call_timeout_s = 1e308") == call_timeout("1e+308"));
  CHECK(loaded("call_timeout_s = nan") == call_timeout("nan"));
  CHECK(loaded("call_timeout_s = inf") == call_timeout("inf"));
  CHECK(loaded("call_timeout_s = -inf") == call_timeout("-inf"));
  CHECK(loaded("call_timeout_s = -5") == call_timeout("-5"));
  CHECK(loaded("call_timeout_s = 0") == call_timeout("0"));
  CHECK(loaded("call_timeout_s = 604801") == call_timeout("604801"));
  CHECK(loaded("call_timeout_s = 604800") == "");
  // The column is the key's, wherever it stands on its line.
  CHECK(loaded("  job_timeout_s = -1.5")
        == dir / "settings.toml:4:3: evaluator.job_timeout_s must be a finite number of seconds "
                 "in (0, 604800], not -1.5");
  CHECK(loaded("max_attempts = 0")
        == dir / "settings.toml:4:1: evaluator.max_attempts must be an integer in [1, 100], not 0");
  CHECK(loaded("devices = 100000000000")
        == dir / "settings.toml:4:1: evaluator.devices must be an integer in [0, 1024] (0: one "
                 "per GPU, or one CPU slot), not 100000000000");
  // A dotted key at the top level and an inline table are located alike.
  test::write_file(dir / "dotted.toml", "evaluator.start_timeout_s = nan\n");
  settings s;
  CHECK(describe(load_settings(dir / "dotted.toml", s))
        == dir / "dotted.toml:1:11: evaluator.start_timeout_s must be a finite number of seconds "
                 "in (0, 604800], not nan");
  test::write_file(dir / "inline.toml", "\n\nllm = { temperature = 1e308 }\n");
  CHECK(describe(load_settings(dir / "inline.toml", s))
        == dir / "inline.toml:3:9: llm.temperature must be a finite number in [0, 2], not 1e+308");
}

TEST_CASE("every number key refuses NaN, infinities and 1e308", "[cluster]") {
  test::temp_dir dir;
  size_t numbers = 0;
  // Every number key of the list, none left out by hand.
  for (auto& d : setting_docs()) {
    if (d.type != "number")
      continue;
    auto dot = d.key.find('.');
    auto section = d.key.substr(0, dot), key = d.key.substr(dot + 1);
    for (auto value : {"nan", "inf", "-inf", "1e308", "-1e308"}) {
      auto line = key + " = " + value;
      INFO(section << "." << line);
      test::write_file(dir / "n.toml", "[" + section + "]\n" + line + "\n");
      settings s;
      auto err = describe(load_settings(dir / "n.toml", s));
      CHECK_THAT(err, Catch::StartsWith(dir / "n.toml:2:1: " + section + "." + key
                                        + " must be a finite number"));
    }
    ++numbers;
  }
  CHECK(numbers >= 26);
  // Integers too large for any sensible count.
  for (auto& d : setting_docs()) {
    if (d.type != "integer")
      continue;
    auto dot = d.key.find('.');
    auto section = d.key.substr(0, dot), key = d.key.substr(dot + 1);
    INFO(section << "." << key);
    test::write_file(dir / "i.toml", "[" + section + "]\n" + key + " = 9223372036854775807\n");
    settings s;
    auto err = describe(load_settings(dir / "i.toml", s));
    CHECK_THAT(err, Catch::StartsWith(dir / "i.toml:2:1: " + section + "." + key
                                      + " must be an integer"));
    CHECK_THAT(err, Catch::EndsWith("not 9223372036854775807"));
  }
}

TEST_CASE("a sweep's conditions are every sweep setting, as a reader writes it", "[cluster]") {
  settings s;
  s.timing.timer = "adaptive";
  s.timing.rounds = 3;
  s.call_timeout_s = 45;
  s.sandbox = "off";
  s.timing.extra_inputs = true;
  auto conditions = sweep_conditions_of(s);
  for (auto& [key, value] : sweep_settings_of(s)) {
    INFO(key);
    CHECK(conditions.count(key) == 1);
  }
  CHECK(conditions.size() == sweep_settings_of(s).size());
  CHECK(conditions["timing.timer"] == "adaptive");
  CHECK(conditions["timing.rounds"] == "3");
  CHECK(conditions["evaluator.call_timeout_s"] == "45.0");
  CHECK(conditions["evaluator.sandbox"] == "off");
  // Resolved for the backend, not the file's "auto".
  CHECK(conditions["checks.extra_inputs"] == "on");
  // What a result carries: the runner's sweep settings and the slot's timeouts, alike written.
  auto measured = result_settings_of(runner_options_of(s), 600, 45);
  CHECK(measured["timing.timer"] == "adaptive");
  CHECK(measured["timing.rounds"] == "3");
  CHECK(measured["timing.reference_cache"] == "true");
  CHECK(measured["checks.exploits"] == "true");
  CHECK(measured["checks.extra_inputs"] == "on");
  CHECK(measured["evaluator.call_timeout_s"] == "45.0");
  CHECK(measured["evaluator.job_timeout_s"] == "600.0");
  CHECK(measured.count("evaluator.sandbox") == 0);
  for (auto& [key, value] : measured) {
    INFO(key);
    CHECK(conditions[key] == value);
  }
}

TEST_CASE("validate names the key of a value that came from elsewhere", "[cluster]") {
  settings s;
  s.call_timeout_s = std::numeric_limits<double>::quiet_NaN();
  CHECK(describe(validate(s))
        == "evaluator.call_timeout_s must be a finite number of seconds in (0, 604800], not nan");
  s = settings{};
  s.p = std::numeric_limits<double>::infinity();
  CHECK(describe(validate(s)) == "run.p must be a finite number in [0, 1000], not inf");
  s = settings{};
  s.ka_workers = 0;
  CHECK(describe(validate(s)) == "kernel_agent.workers must be an integer in [1, 1024], not 0");
  s = settings{};
  s.node_silence_s = s.heartbeat_s;
  CHECK(describe(validate(s)) == "nodes.silence_s must be above nodes.heartbeat_s");
}

TEST_CASE("a job's settings are the sweep's, over the slot's device, node, threads and cache folder",
          "[cluster]") {
  bb::settings s;
  s.timing.rounds = 3;
  s.timing.timer = "adaptive";
  s.timing.exploit_checks = false;
  s.timing.reference_cache = false;
  auto sweep = bb::runner_options_of(s);
  CHECK_FALSE(sweep.reference_cache);
  bb::runner_options own;
  own.device = "cuda";
  own.node = "node-b";
  own.cpu_threads = 7;
  own.reference_cache_dir = "/var/cache/refs";
  own.rounds = 5;
  auto opts = bb::job_options(own, bb::pack_settings(sweep));
  CHECK(opts.rounds == 3);
  CHECK(opts.timer == "adaptive");
  CHECK_FALSE(opts.exploit_checks);
  CHECK_FALSE(opts.reference_cache);
  CHECK(opts.device == "cuda");
  CHECK(opts.node == "node-b");
  CHECK(opts.cpu_threads == 7);
  CHECK(opts.reference_cache_dir == "/var/cache/refs");
  // A job without settings (an older coordinator's): the slot's own.
  CHECK(bb::job_options(own, "").rounds == 5);
}
