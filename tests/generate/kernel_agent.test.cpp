#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "generate/kernel_agent.hpp"
#include "support.hpp"

using namespace bb;
namespace fs = std::filesystem;

namespace {

void write_round(const fs::path& session, int worker, int round, bool success,
                 const std::string& when, const std::string& out, const std::string& err) {
  auto dir = session / "workers" / ("worker_" + std::to_string(worker));
  fs::create_directories(dir);
  nlohmann::json j = {{"round", round},        {"timestamp", when}, {"success", success},
                      {"kernel_code", "x = 1"}, {"stdout", out},     {"stderr", err}};
  std::ofstream(dir / ("round_" + std::to_string(round) + ".json")) << j.dump(2);
}

} // namespace

TEST_CASE("the last round of an agent that found no kernel says what failed", "[generate]") {
  bb::test::temp_dir tmp;
  auto session = fs::path(tmp.path) / "session_20260114_152250_994449";
  CHECK(last_round_failure(session.string()).where.empty()); // no session, no rounds
  write_round(session, 0, 1, false, "2026-01-14T15:22:51", "case 1 failed: first try\n", "");
  write_round(session, 0, 2, false, "2026-01-14T15:22:58",
              "case 1 passed\ncase 2 failed: ((T([2, 3], f32),), {}): AssertionError: Tensor-likes "
              "are not close!\nfailed: case 2\n",
              "Test exited with code 1\n");
  write_round(session, 1, 1, false, "2026-01-14T15:22:53", "", "Traceback ...\nNameError: name 'tl' is not defined\n");
  auto last = last_round_failure(session.string());
  CHECK(last.where == "worker 0, round 2"); // worker 0's round 2 is the latest of the last rounds
  CHECK(last.line == "case 2 failed: ((T([2, 3], f32),), {}): AssertionError: Tensor-likes are not close!");
  CHECK_THAT(last.output, Catch::Contains("case 1 passed"));
  CHECK_THAT(last.output, Catch::Contains("Test exited with code 1"));

  // Without a failing line in stdout, the exception that ended the round (stderr's end).
  auto other = fs::path(tmp.path) / "session_2";
  write_round(other, 3, 1, false, "2026-01-14T15:23:00", "",
              "Traceback ...\nNameError: name 'tl' is not defined\nTest exited with code 1\n");
  last = last_round_failure(other.string());
  CHECK(last.where == "worker 3, round 1");
  CHECK(last.line == "NameError: name 'tl' is not defined");
}

TEST_CASE("a missing provider is explained with what to set", "[generate]") {
  auto relay = provider_advice("KernelAgent has no provider for model 'scripted': No available provider "
                               "for model 'scripted'. Tried providers: ['RelayProvider']. Check API "
                               "keys and dependencies.");
  CHECK_THAT(relay, Catch::Contains("LLM_RELAY_URL"));
  CHECK_THAT(relay, Catch::Contains("--llm-base-url"));
  CHECK_THAT(relay, Catch::Contains("--llm-model"));
  CHECK_FALSE(Catch::contains(relay, "ANTHROPIC_API_KEY"));
  auto claude = provider_advice("No available provider for model 'claude-sonnet-4-20250514'. Tried "
                                "providers: ['AnthropicProvider']. Check API keys and dependencies.");
  CHECK_THAT(claude, Catch::Contains("ANTHROPIC_API_KEY"));
  CHECK_FALSE(Catch::contains(claude, "LLM_RELAY_URL"));
  auto both = provider_advice("No available provider for model 'gpt-5'. Tried providers: "
                              "['RelayProvider', 'OpenAIProvider'].");
  CHECK_THAT(both, Catch::Contains("OPENAI_API_KEY"));
  CHECK_THAT(both, Catch::Contains("LLM_RELAY_URL"));
  auto pinned = provider_advice("Preferred provider 'OpenAIProvider' is not configured for model "
                                "'scripted'. Allowed providers: ['RelayProvider']");
  CHECK_THAT(pinned, Catch::Contains("--llm-provider"));
}

TEST_CASE("a configuration error is final, and an agent that raised is run again", "[generate]") {
  bb::test::temp_dir tmp;
  // An adapter that answers each run with the result named in its folder, counting runs.
  bb::test::write_file(tmp / "adapter.py",
                       "import os, shutil, sys\n"
                       "here = os.path.dirname(os.path.abspath(__file__))\n"
                       "with open(os.path.join(here, 'runs'), 'a') as f:\n    f.write('run\\n')\n"
                       "shutil.copy(os.path.join(here, 'answer.json'), sys.argv[2])\n");
  kernel_agent_config cfg;
  cfg.python = "python3";
  cfg.adapter = tmp / "adapter.py";
  cfg.max_retries = 2;
  cfg.backoff_s = 0;
  author_request req;
  req.op.op_name = "aten.relu.default";
  req.op.folder = "relu__default";
  req.log_dir = tmp.path;
  std::vector<double> slept;
  auto sleep = [&](double s) { slept.push_back(s); };

  bb::test::write_file(tmp / "answer.json",
                       R"({"error": "configuration", "message": "KernelAgent has no provider for model 'm': )"
                       R"(No available provider for model 'm'. Tried providers: ['RelayProvider']."})");
  auto reply = run_kernel_agent(cfg, req, sleep);
  CHECK(reply.tries == 1);
  CHECK_FALSE(reply.transient);
  CHECK(reply.code.empty());
  CHECK_THAT(reply.why, Catch::Contains("No available provider for model 'm'"));
  CHECK_THAT(reply.why, Catch::Contains("To fix: KernelAgent sends a model it does not know to its relay"));
  CHECK(bb::test::read_file(tmp / "runs") == "run\n");

  fs::remove(tmp / "runs");
  bb::test::write_file(tmp / "answer.json", R"({"error": "exception", "message": "RuntimeError: 502 from the relay"})");
  reply = run_kernel_agent(cfg, req, sleep);
  CHECK(reply.tries == 3);
  CHECK(reply.transient);
  CHECK_THAT(reply.why, Catch::Contains("the agent raised RuntimeError: 502 from the relay"));
  CHECK(bb::test::read_file(tmp / "runs") == "run\nrun\nrun\n");
  // The request carries the model's settings and no key.
  auto request = nlohmann::json::parse(bb::test::read_file(tmp / "relu__default_v1.request.json"));
  CHECK(request["log_dir"] == tmp / "relu__default_v1");
  CHECK(request["generate_default_test"] == false);
  CHECK(request.contains("model"));
  CHECK(request.contains("base_url"));
}
