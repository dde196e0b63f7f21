// The generative backends end to end: bbcluster --backend llm against a chat-completions
// server on loopback with scripted replies, and --backend kernel_agent with a stand-in
// triton_kernel_agent package (tests/kernel_agent) on PYTHONPATH.

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "programs.hpp"

using nlohmann::json;
using bb::test::run;
namespace fs = std::filesystem;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string hf_train = BB_TRACES_DIR "/hf_train";
const std::string api_key = "sk-bbtest-never-in-a-file-4242";
// The stand-in KernelAgent on the path, with a provider for its default model
// (claude-sonnet-4-20250514: Anthropic, available with a key). Its scripted behaviours write
// kernels themselves; only "model" asks the model.
const std::string agent_env = "ANTHROPIC_API_KEY=" + api_key + " PYTHONPATH=" BB_SOURCE_DIR "/tests/kernel_agent ";

// Short timings: CPU evaluation of a few inputs, quick retries.
const char* fast_settings = R"([timing]
cpu_warmup = 1
cpu_runs = 3
[llm]
timeout_s = 1.5
max_retries = 1
backoff_s = 0.1
[kernel_agent]
timeout_s = 120.0
max_retries = 1
backoff_s = 0.1
)";

std::string fence(const std::string& lang, const std::string& code) {
  return "```" + lang + "\n" + code + "```\n";
}

// The chat-completions server of tests/llm, stopped when the object goes.
struct llm_server {
  std::string port;
  pid_t pid = 0;
  llm_server(const bb::test::temp_dir& dir, const json& script) {
    bb::test::write_file(dir / "script.json", script.dump());
    auto cmd = "/usr/bin/python3 " BB_SOURCE_DIR "/tests/llm/fake_llm_server.py " + dir / "script.json"
               + " " + dir / "port " + dir / "requests.jsonl " + api_key + " >" + dir / "server.log"
               + " 2>&1 & echo $! >" + dir / "server.pid";
    REQUIRE(std::system(cmd.c_str()) == 0);
    for (int i = 0; i < 200 && port.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      port = bb::test::read_file(dir / "port");
    }
    pid = std::atoi(bb::test::read_file(dir / "server.pid").c_str());
    REQUIRE_FALSE(port.empty());
  }
  ~llm_server() {
    if (pid > 0)
      ::kill(pid, SIGKILL);
  }
};

std::vector<json> requests_of(const bb::test::temp_dir& dir, const std::string& op) {
  std::vector<json> out;
  for (auto& j : bb::test::journal_lines(dir / "requests.jsonl"))
    if (j["op"] == op)
      out.push_back(j);
  return out;
}

fs::path only_run_folder(const std::string& parent, const std::string& prefix) {
  std::vector<fs::path> found;
  for (auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().rfind(prefix, 0) == 0)
      found.push_back(e.path());
  REQUIRE(found.size() == 1);
  return found[0];
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

// Whether `text` occurs in any file under `dir`.
bool appears_under(const fs::path& dir, const std::string& text) {
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && bb::test::read_file(e.path().string()).find(text) != std::string::npos)
      return true;
  return false;
}

// Processes whose command line mentions `text` (a test's folder).
std::vector<pid_t> processes_mentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (auto& e : fs::directory_iterator("/proc")) {
    pid_t pid = std::atoi(e.path().filename().c_str());
    if (pid <= 0 || pid == ::getpid())
      continue;
    auto cmdline = bb::test::read_file((e.path() / "cmdline").string());
    if (cmdline.find(text) != std::string::npos)
      out.push_back(pid);
  }
  return out;
}

bool no_process_mentions(const std::string& text, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (processes_mentioning(text).empty())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::map<std::string, json> finished_by_op(const std::string& journal) {
  std::map<std::string, json> out;
  for (auto& j : bb::test::journal_lines(journal, "job_finished"))
    out[j["op_name"]] = j;
  return out;
}

} // namespace

TEST_CASE("the llm backend converges after feedback, retries 429s and survives a silent server",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  json script = {
    {"aten.relu.default",
     {{{"content", "Here it is.\n" + fence("python", "import torch\n\ndef relu__default_kernel_impl(x):\n    return torch.clamp(x, min=0)\n")}}}},
    {"aten.tanh.default",
     {{{"content", fence("python", "def tanh__default_kernel_impl(x):\n    return x * 0.5\n")}},
      {{"content", fence("python", "import torch\n\ndef tanh__default_kernel_impl(x):\n    return torch.tanh(x)\n")}}}},
    {"aten.cos.default", {{{"content", "I would rather not write this one."}}}},
    {"aten.neg.default",
     {{{"status", 429}, {"retry_after", "1"}},
      {{"content", fence("py", "def kernel_function(x):\n    return -x\n")}}}},
    {"aten.add.Tensor", {{{"hang", 30}}}},
  };
  llm_server server(dir, script);
  auto cmd = "OPENAI_API_KEY=" + api_key + " " + bbcluster + " --suite torchbench --data " + hf_train
             + " --ops relu.default,tanh.default,cos.default,neg.default,add.Tensor --topn 1"
             + " --backend llm --llm-model scripted --llm-dsl pytorch --llm-attempts 2"
             + " --llm-base-url http://127.0.0.1:" + server.port + "/v1 --config " + dir / "fast.toml"
             + " --log-dir " + dir / "run";
  auto r = run(dir, cmd);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.60") == 0);

  // The second tanh request carries the first version's evaluation.
  auto tanh = requests_of(dir, "aten.tanh.default");
  REQUIRE(tanh.size() == 2);
  CHECK(tanh[0]["prompt"].get<std::string>().find("Incorrect on input") == std::string::npos);
  auto second = tanh[1]["prompt"].get<std::string>();
  CHECK_THAT(second, Catch::Contains("Your previous version was evaluated"));
  CHECK_THAT(second, Catch::Contains("Incorrect on input"));
  CHECK_THAT(second, Catch::Contains("max absolute error"));
  CHECK_THAT(second, Catch::Contains("return x * 0.5"));
  // 429 then success within one version; a silent server: two tries per version, two versions.
  CHECK(requests_of(dir, "aten.neg.default").size() == 2);
  CHECK(requests_of(dir, "aten.add.Tensor").size() == 4);
  CHECK(requests_of(dir, "aten.cos.default").size() == 2);
  for (auto& j : bb::test::journal_lines(dir / "requests.jsonl")) {
    CHECK(j["authorization_ok"] == true);
    CHECK(j["model"] == "scripted");
  }

  auto finished = finished_by_op(dir / "run/results.jsonl");
  REQUIRE(finished.size() == 5);
  CHECK(finished["aten.relu.default"]["outcome"] == "ok");
  CHECK(finished["aten.relu.default"]["version"] == 1);
  CHECK(finished["aten.tanh.default"]["version"] == 2);
  CHECK(finished["aten.tanh.default"]["correctness"][0]["is_correct"] == true);
  CHECK(finished["aten.neg.default"]["correctness"][0]["is_correct"] == true);
  CHECK(finished["aten.cos.default"]["outcome"] == "no_kernel");
  CHECK_THAT(finished["aten.cos.default"]["detail"].get<std::string>(), Catch::Contains("no fenced code block"));
  CHECK(finished["aten.add.Tensor"]["outcome"] == "no_kernel");
  CHECK_THAT(finished["aten.add.Tensor"]["detail"].get<std::string>(), Catch::Contains("no answer within"));
  // Every evaluated version: relu 1, tanh 2, cos 2, neg 1, add 2.
  CHECK(bb::test::journal_lines(dir / "run/results.jsonl", "version_evaluated").size() == 8);

  auto folder = only_run_folder(dir / "run", "llm_run_");
  CHECK(names_in(folder / "tanh__default")
        == std::set<std::string>{"tanh__default_implementation_v1.py", "tanh__default_implementation_v2.py",
                                 "tanh__default_summary.txt"});
  CHECK(names_in(folder / "cos__default") == std::set<std::string>{"cos__default_summary.txt"});
  auto neg = bb::test::read_file((folder / "neg__default/neg__default_implementation_v1.py").string());
  CHECK_THAT(neg, Catch::Contains("neg__default_kernel_impl = kernel_function"));
  auto tanh_summary = bb::test::read_file((folder / "tanh__default/tanh__default_summary.txt").string());
  CHECK_THAT(tanh_summary, Catch::Contains("Final status: passed (version 2 stands)"));
  auto overall = bb::test::read_file((folder / "OVERALL_SUMMARY.txt").string());
  CHECK_THAT(overall, Catch::Contains("Success rate: 60.0%"));
  CHECK_THAT(overall, Catch::Contains("model: scripted"));

  // The key went to the server and nowhere else.
  CHECK_FALSE(appears_under(dir / "run", api_key));
  CHECK(r.out.find(api_key) == std::string::npos);
  CHECK(r.err.find(api_key) == std::string::npos);
}

TEST_CASE("the llm backend writes a .cu kernel for --llm-dsl cuda, and without a GPU it is left out",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  auto cu = std::string("#include <bbcluster/kernel.h>\n\nat::Tensor relu__default_kernel_impl(const at::Tensor& self) {\n"
                        "  return self.clamp_min(0);\n}\n\nBBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)\n");
  llm_server server(dir, json{{"aten.relu.default", {{{"content", fence("cuda", cu)}}}}});
  auto r = run(dir, bbcluster + " --suite torchbench --data " + hf_train + " --ops relu.default --topn 1"
                      + " --backend llm --llm-model scripted --llm-dsl cuda --llm-base-url http://127.0.0.1:"
                      + server.port + "/v1 --config " + dir / "fast.toml --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto prompt = requests_of(dir, "aten.relu.default");
  REQUIRE(prompt.size() == 1); // needs_cuda is final: another version would not run here either
  CHECK_THAT(prompt[0]["prompt"].get<std::string>(), Catch::Contains("BBCLUSTER_EXPORT_KERNEL"));
  auto folder = only_run_folder(dir / "run", "llm_run_");
  CHECK(bb::test::read_file((folder / "relu__default/relu__default_implementation_v1.cu").string()) == cu);
  auto finished = finished_by_op(dir / "run/results.jsonl");
  if (!std::getenv("CUDA_VISIBLE_DEVICES") && !fs::exists("/dev/nvidia0")) {
    CHECK(finished["aten.relu.default"]["outcome"] == "needs_cuda");
    CHECK_THAT(r.out, Catch::Contains("1 of 1 operators skipped"));
    CHECK_THAT(bb::test::read_file((folder / "relu__default/relu__default_summary.txt").string()),
               Catch::Contains("Final status: skipped"));
  }
}

TEST_CASE("the llm backend speaks Anthropic's messages API", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  llm_server server(dir, json{{"aten.relu.default",
                               {{{"content", fence("python", "import torch\n\ndef relu__default_kernel_impl(x):\n    return torch.clamp(x, min=0)\n")}}}}});
  auto r = run(dir, "ANTHROPIC_API_KEY=" + api_key + " " + bbcluster + " --suite torchbench --data " + hf_train
                      + " --ops relu.default --topn 1 --backend llm --llm-provider anthropic --llm-model scripted"
                      + " --llm-dsl pytorch --llm-base-url http://127.0.0.1:" + server.port + "/v1 --config "
                      + dir / "fast.toml --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  auto requests = requests_of(dir, "aten.relu.default");
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["api"] == "anthropic");
  CHECK(requests[0]["authorization_ok"] == true);
  CHECK_FALSE(appears_under(dir / "run", api_key));
}

TEST_CASE("the llm backend refuses to start without a model or a usable URL", "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, bbcluster + " --backend llm --log-dir " + dir / "run");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("--llm-model"));
  auto url = run(dir, bbcluster + " --backend llm --llm-model m --llm-base-url localhost:1 --log-dir " + dir / "run");
  CHECK(url.status == 2);
  CHECK_THAT(url.err, Catch::Contains("http://"));
}

TEST_CASE("kernel_agent: a campaign leaves KernelAgent's run folder, which re-evaluates as a "
          "directory", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  auto cmd = agent_env + bbcluster + " --suite torchbench --data "
             + hf_train + " --backend kernel_agent --ops relu.default,leaky_relu.default --topn 5"
             + " --kernel-agent-workers 2 --kernel-agent-max-rounds 3 --config " + dir / "fast.toml"
             + " --log-dir " + dir / "run";
  auto r = run(dir, cmd);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK_THAT(r.out, Catch::Contains("performance score (geomean speedup over all operators): "));
  CHECK_THAT(r.out, Catch::Contains("perf@p score (rate of correct samples with a speedup greater than p, p=1.0): "));

  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto top = names_in(folder);
  std::string session;
  for (auto& n : top)
    if (n.rfind("relu__default_session_", 0) == 0)
      session = n;
  REQUIRE_FALSE(session.empty());
  CHECK(top == std::set<std::string>{"agent_logs", "relu__default", session, "OVERALL_SUMMARY.txt", "README.md"});
  CHECK(names_in(folder / "relu__default")
        == std::set<std::string>{"relu__default_implementation_v1.py", "relu__default_summary.txt"});
  // KernelAgent's session name whole, as BackendBench's integration keeps it.
  CHECK(session.rfind("relu__default_session_session_", 0) == 0);
  CHECK(fs::exists(folder / session / "final_kernel.py"));
  // The stand-in accepts a kernel only when the test code bbcluster wrote passes with it.
  auto round = json::parse(bb::test::read_file((folder / session / "workers/worker_0/round_1.json").string()));
  CHECK(round["success"] == true);
  CHECK_THAT(round["stdout"].get<std::string>(), Catch::Contains("all cases passed"));
  CHECK_THAT(bb::test::read_file((folder / "agent_logs/relu__default_v1.log").string()),
             Catch::Contains("2 workers, 3 rounds"));
  // One log per operator and version, nothing shared: KernelAgent's own agent_<second>.log
  // (which agents started in the same second share) and its empty manager_<second>.log are
  // gone, and so is each run's own folder once its session moved out.
  std::set<std::string> logs;
  for (auto& name : names_in(folder / "agent_logs"))
    if (name.rfind("relu__default_v1", 0) != 0 && name.rfind("leaky_relu__default_v1", 0) != 0)
      logs.insert(name);
  CHECK(logs.empty());
  CHECK(names_in(folder / "agent_logs").count("relu__default_v1") == 0);
  CHECK_FALSE(appears_under(folder, api_key));
  auto summary = bb::test::read_file((folder / "relu__default/relu__default_summary.txt").string());
  CHECK_THAT(summary, Catch::Contains("Operation: relu\n"));
  CHECK_THAT(summary, Catch::Contains("Full op name: aten.relu.default\n"));
  CHECK_THAT(summary, Catch::Contains("Backend: kernel_agent\n"));
  CHECK_THAT(summary, Catch::Contains("KernelAgent workers: 2"));
  CHECK_THAT(summary, Catch::Contains("Attempts: 1\n"));
  CHECK_THAT(summary, Catch::Contains("Final status: passed"));
  CHECK_THAT(summary, Catch::Contains("agent worker 0, 1 rounds"));
  CHECK_THAT(summary, Catch::Contains("KernelAgent model: claude-sonnet-4-20250514\n"));
  CHECK_THAT(summary, Catch::Contains("KernelAgent provider: anthropic"));
  CHECK_THAT(summary, Catch::Contains("KernelAgent writes its own test too: no\n"));
  auto overall = bb::test::read_file((folder / "OVERALL_SUMMARY.txt").string());
  CHECK_THAT(overall, Catch::Contains("Success rate: 100.0%"));

  auto again = run(dir, bbcluster + " --suite torchbench --data " + hf_train
                          + " --backend directory --ops-directory " + folder.string()
                          + " --topn 5 --config " + dir / "fast.toml --log-dir " + dir / "again");
  INFO(again.err);
  REQUIRE(again.status == 0);
  CHECK(again.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK(again.err.find("left out") == std::string::npos); // logs and sessions are not kernels
  auto redone = finished_by_op(dir / "again/results.jsonl");
  REQUIRE(redone.size() == 1);
  CHECK(redone["aten.relu.default"]["correctness"].size() == 5);
}

TEST_CASE("kernel_agent: crashes are retried, failures and wrong kernels get another version",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  bb::test::write_file(dir / "agent.json", json{{"aten.relu.default", {"crash", "success"}},
                                                {"aten.tanh.default", {"wrong", "success"}},
                                                {"aten.cos.default", {"fail"}}}
                                             .dump());
  auto cmd = "FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " " + agent_env
             + bbcluster + " --suite torchbench --data " + hf_train
             + " --backend kernel_agent --ops relu.default,tanh.default,cos.default --topn 1"
             + " --llm-attempts 2 --config " + dir / "fast.toml --log-dir " + dir / "run";
  auto r = run(dir, cmd);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.67") == 0);
  auto finished = finished_by_op(dir / "run/results.jsonl");
  REQUIRE(finished.size() == 3);
  CHECK(finished["aten.relu.default"]["version"] == 1); // the crash was retried within v1
  CHECK(finished["aten.relu.default"]["outcome"] == "ok");
  CHECK(finished["aten.tanh.default"]["version"] == 2);
  CHECK(finished["aten.tanh.default"]["correctness"][0]["is_correct"] == true);
  CHECK(finished["aten.cos.default"]["outcome"] == "no_kernel");
  CHECK_THAT(finished["aten.cos.default"]["detail"].get<std::string>(), Catch::Contains("KernelAgent found no kernel"));

  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto logs = folder / "agent_logs";
  CHECK_THAT(bb::test::read_file((logs / "relu__default_v1.log").string()), Catch::Contains("call 1: crash"));
  CHECK_THAT(bb::test::read_file((folder / "relu__default/relu__default_summary.txt").string()),
             Catch::Contains("2 runs"));
  // v2 of tanh was asked for with v1's evaluation: in the problem description, and in the test
  // code (what KernelAgent's kernel prompts show), its wrong input checked first.
  auto v2 = json::parse(bb::test::read_file((logs / "tanh__default_v2.request.json").string()));
  CHECK_THAT(v2["problem_description"].get<std::string>(), Catch::Contains("Incorrect on input"));
  auto tanh_v1 = bb::test::journal_lines(dir / "run/results.jsonl", "version_evaluated");
  std::string wrong_input;
  for (auto& j : tanh_v1)
    if (j["op_name"] == "aten.tanh.default" && j["version"] == 1)
      wrong_input = j["correctness"][0]["args"].get<std::string>();
  REQUIRE_FALSE(wrong_input.empty());
  auto v2_test = v2["test_code"].get<std::string>();
  CHECK_THAT(v2_test, Catch::Contains("PREVIOUSLY_FAILED = [\n    (r\"\"\"" + wrong_input + "\"\"\", \"max absolute error"));
  CHECK_THAT(v2_test, Catch::Contains("previous kernel (version 1) and it was wrong"));
  CHECK(fs::exists(folder / "tanh__default/tanh__default_implementation_v2.py"));
  // An agent that found no kernel: its last round's failure is in the summary and in the next
  // version's feedback.
  auto cos_detail = finished["aten.cos.default"]["detail"].get<std::string>();
  CHECK_THAT(cos_detail, Catch::Contains("KernelAgent found no kernel (Failed to generate working kernel); "
                                         "its last round (worker 0, round 1) failed: case 1 failed: "));
  CHECK_THAT(cos_detail, Catch::Contains("AssertionError"));
  auto cos_summary = bb::test::read_file((folder / "cos__default/cos__default_summary.txt").string());
  CHECK_THAT(cos_summary, Catch::Contains("its last round (worker 0, round 1) failed: case 1 failed"));
  auto cos_v2 = json::parse(bb::test::read_file((logs / "cos__default_v2.request.json").string()));
  CHECK_THAT(cos_v2["test_code"].get<std::string>(),
             Catch::Contains("# The previous attempt (version 1) failed as a whole: no_kernel."));
  CHECK_THAT(cos_v2["test_code"].get<std::string>(), Catch::Contains("its last round (worker 0, round 1) failed: case 1 failed"));
  CHECK_THAT(cos_v2["problem_description"].get<std::string>(), Catch::Contains("its last round (worker 0, round 1) failed"));
  // A failed agent's session is kept too: two versions of cos, two sessions.
  size_t cos_sessions = 0;
  for (auto& n : names_in(folder))
    cos_sessions += n.rfind("cos__default_session_", 0) == 0;
  CHECK(cos_sessions == 2);
}

TEST_CASE("kernel_agent: a hung agent is killed at its timeout, run again, then given up",
          "[integration]") {
  bb::test::temp_dir dir;
  auto settings = std::string(fast_settings);
  settings.replace(settings.find("timeout_s = 120.0"), 17, "timeout_s = 3.0");
  bb::test::write_file(dir / "fast.toml", settings);
  bb::test::write_file(dir / "agent.json", json{{"aten.neg.default", {"hang"}}}.dump());
  auto r = run(dir, "FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " " + agent_env + bbcluster + " --suite torchbench --data " + hf_train
                      + " --backend kernel_agent --ops neg.default --topn 1 --llm-attempts 1"
                      + " --config " + dir / "fast.toml --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.00") == 0);
  auto finished = finished_by_op(dir / "run/results.jsonl");
  REQUIRE(finished.size() == 1);
  CHECK(finished["aten.neg.default"]["outcome"] == "no_kernel");
  CHECK_THAT(finished["aten.neg.default"]["detail"].get<std::string>(), Catch::Contains("did not finish within 3 s"));
  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto log = bb::test::read_file((folder / "agent_logs/neg__default_v1.log").string());
  CHECK_THAT(log, Catch::Contains("call 2: hang")); // run again after the first hang
  CHECK_THAT(bb::test::read_file((folder / "neg__default/neg__default_summary.txt").string()),
             Catch::Contains("Final status: failed"));
  // Neither the agent nor its worker process is left behind.
  CHECK(no_process_mentions(dir.path, 5));
}

TEST_CASE("kernel_agent: a killed bbcluster takes its agents and their workers with it",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  bb::test::write_file(dir / "agent.json", json{{"aten.neg.default", {"hang"}}}.dump());
  auto cmd = "FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " " + agent_env + "exec "
             + bbcluster + " --suite torchbench --data " + hf_train
             + " --backend kernel_agent --ops neg.default --topn 1 --config " + dir / "fast.toml"
             + " --log-dir " + dir / "run >" + dir / "out 2>&1";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  // Wait until the agent hangs with its worker started.
  bool hanging = false;
  for (int i = 0; i < 600 && !hanging; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (auto& e : fs::recursive_directory_iterator(dir.path, fs::directory_options::skip_permission_denied))
      if (e.path().filename() == "neg__default_v1.log"
          && bb::test::read_file(e.path().string()).find("call 1: hang") != std::string::npos)
        hanging = true;
  }
  REQUIRE(hanging);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(processes_mentioning(dir / "run").size() >= 2); // the adapter and the agent's worker
  ::kill(pid, SIGKILL);
  CHECK(bb::test::wait_exit(pid, 10) == -1);
  CHECK(no_process_mentions(dir / "run", 10));
}

namespace {

// `bbcluster serve` on a loopback port of its own, stopped when the object goes.
struct served_cluster {
  std::string address;
  pid_t pid = 0;
  served_cluster(const bb::test::temp_dir& dir, const std::string& config) {
    auto cmd = bbcluster + " serve --listen tcp://127.0.0.1:0 --devices 1 --config " + config + " --log-dir "
               + dir / "served" + " >" + dir / "served.log 2>&1 & echo $! >" + dir / "served.pid";
    REQUIRE(std::system(cmd.c_str()) == 0);
    for (int i = 0; i < 600 && address.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      address = bb::test::read_file(dir / "served/endpoint");
      while (!address.empty() && std::isspace(static_cast<unsigned char>(address.back())))
        address.pop_back();
    }
    pid = std::atoi(bb::test::read_file(dir / "served.pid").c_str());
    INFO(bb::test::read_file(dir / "served.log"));
    REQUIRE_FALSE(address.empty());
  }
  ~served_cluster() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 200 && ::kill(pid, 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ::kill(pid, SIGKILL);
    }
  }
};

} // namespace

TEST_CASE("kernel_agent: with verify_with, the agent's test runs check candidates on a served "
          "cluster", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  bb::test::write_file(dir / "agent.json", json{{"aten.tanh.default", {"fail", "success"}}}.dump());
  served_cluster served(dir, dir / "fast.toml");
  auto r = run(dir, agent_env + "FAKE_AGENT_SCRIPT=" + dir / "agent.json " + bbcluster + " --suite torchbench --data "
                      + hf_train + " --backend kernel_agent --ops relu.default,tanh.default --topn 2"
                      + " --kernel-agent-workers 1 --config " + dir / "fast.toml --set kernel_agent.verify_with="
                      + served.address + " --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK_THAT(r.err, Catch::Contains("KernelAgent's test runs check candidates on the bbcluster service at " + served.address));
  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto round_of = [&](const std::string& prefix) {
    for (auto& n : names_in(folder))
      if (n.rfind(prefix, 0) == 0 && fs::exists(folder / n / "workers/worker_0/round_1.json"))
        return json::parse(bb::test::read_file((folder / n / "workers/worker_0/round_1.json").string()));
    return json();
  };
  // relu's test run passed on the service's verdict, not on the local cases.
  auto relu = round_of("relu__default_session_");
  REQUIRE(relu.is_object());
  CHECK(relu["success"] == true);
  CHECK_THAT(relu["stdout"].get<std::string>(), Catch::Contains("all inputs passed"));
  CHECK(relu["stdout"].get<std::string>().find("all cases passed") == std::string::npos);
  // tanh's first version: the service found the wrong kernel wrong, input by input, and the
  // agent saw why.
  auto served_requests = bb::test::read_file(dir / "served/requests.jsonl");
  CHECK_THAT(served_requests, Catch::Contains("aten.relu.default"));
  CHECK_THAT(served_requests, Catch::Contains("aten.tanh.default"));
  CHECK_THAT(served_requests, Catch::Contains("kernel_agent-"));
  bool saw_failure = false;
  for (auto& n : names_in(folder))
    if (n.rfind("tanh__default_session_", 0) == 0 && fs::exists(folder / n / "workers/worker_0/round_1.json")) {
      auto round = json::parse(bb::test::read_file((folder / n / "workers/worker_0/round_1.json").string()));
      if (round["success"] == false) {
        saw_failure = true;
        CHECK_THAT(round["stdout"].get<std::string>(), Catch::Contains("input 1 failed: "));
      }
    }
  CHECK(saw_failure);

  // A service that does not answer is refused before the campaign starts, naming it.
  auto nowhere = run(dir, agent_env + bbcluster + " --suite torchbench --data " + hf_train
                            + " --backend kernel_agent --ops relu.default --topn 1 --config " + dir / "fast.toml"
                            + " --set kernel_agent.verify_with=tcp://127.0.0.1:1 --log-dir " + dir / "nowhere");
  CHECK(nowhere.status != 0);
  CHECK_THAT(nowhere.err, Catch::Contains("kernel_agent.verify_with = tcp://127.0.0.1:1"));
  CHECK_THAT(nowhere.err, Catch::Contains("cannot reach the bbcluster service"));
}

TEST_CASE("kernel_agent: a missing package says so and how to install it", "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, "PYTHONPATH= " + bbcluster + " --backend kernel_agent --log-dir " + dir / "run");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Catch::Contains("triton_kernel_agent"));
  CHECK_THAT(r.err, Catch::Contains("pip install"));
  CHECK_FALSE(fs::exists(dir / "run"));
}

TEST_CASE("kernel_agent: a campaign's kernels are evaluated on the nodes of a hostfile",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  bb::test::write_file(dir / "hosts.txt", "a slots=1\nb slots=1\n");
  auto r = run(dir, agent_env + bbcluster
                      + " --suite torchbench --data " + hf_train
                      + " --backend kernel_agent --ops relu.default,tanh.default,neg.default --topn 1"
                      + " --nodes " + dir / "hosts.txt --launcher local --config " + dir / "fast.toml"
                      + " --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  auto finished = finished_by_op(dir / "run/results.jsonl");
  REQUIRE(finished.size() == 3);
  for (auto& [op, j] : finished) {
    INFO(op);
    CHECK(j["version"] == 1);
    auto node = j["provenance"]["node"].get<std::string>();
    CHECK((node == "a" || node == "b"));
  }
}

TEST_CASE("kernel_agent: a resumed campaign goes on from the last evaluated version",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  bb::test::write_file(dir / "agent.json", json{{"aten.tanh.default", {"wrong", "success"}}}.dump());
  auto env = "FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " " + agent_env;
  auto first = run(dir, "cd " + dir.path + " && " + env + bbcluster + " --suite torchbench --data " + hf_train
                          + " --backend kernel_agent --ops relu.default,tanh.default --topn 1 --llm-attempts 3"
                          + " --config fast.toml --log-dir run");
  INFO(first.err);
  REQUIRE(first.status == 0);
  // As if the campaign had been killed after tanh's v1 was evaluated: its later lines go.
  auto journal = dir / "run/results.jsonl";
  std::string kept;
  for (auto& j : bb::test::journal_lines(journal))
    if (j["op_name"] != "aten.tanh.default" || (j["event"] == "version_evaluated" && j["version"] == 1))
      kept += j.dump() + "\n";
  bb::test::write_file(journal, kept);

  auto resumed = run(dir, env + bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  CHECK_THAT(resumed.err, Catch::Contains("1 go on from a later version"));
  auto finished = bb::test::journal_lines(journal, "job_finished");
  REQUIRE(finished.size() == 2);
  CHECK(finished[1]["op_name"] == "aten.tanh.default");
  CHECK(finished[1]["version"] == 2);
  // The same run folder, v2 written again with v1's evaluation as feedback.
  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto v2 = json::parse(bb::test::read_file((folder / "agent_logs/tanh__default_v2.request.json").string()));
  CHECK_THAT(v2["problem_description"].get<std::string>(), Catch::Contains("Incorrect on input"));
  auto summary = bb::test::read_file((folder / "tanh__default/tanh__default_summary.txt").string());
  CHECK_THAT(summary, Catch::Contains("v1: tanh__default_implementation_v1.py: incorrect"));
  CHECK_THAT(summary, Catch::Contains("before the resume"));
  CHECK_THAT(summary, Catch::Contains("Final status: passed (version 2 stands)"));
  auto overall = bb::test::read_file((folder / "OVERALL_SUMMARY.txt").string());
  CHECK_THAT(overall, Catch::Contains("Passed: 2"));
}

TEST_CASE("kernel_agent: --llm-model and --llm-base-url select the agent's model, and a wrong "
          "v1's evaluation reaches the v2 prompt to the model", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_settings);
  // v1 is the stand-in's own wrong kernel, claimed correct; v2 comes from the model, through
  // KernelAgent's relay (scripted is a model KernelAgent does not know).
  bb::test::write_file(dir / "agent.json", json{{"aten.tanh.default", {"wrong", "model"}}}.dump());
  llm_server server(dir, json{{"aten.tanh.default",
                               {{{"content", fence("python", "import torch\n\ndef kernel_function(x):\n    return torch.tanh(x)\n")}}}}});
  auto url = "http://127.0.0.1:" + server.port;
  auto r = run(dir, "FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " PYTHONPATH=" BB_SOURCE_DIR "/tests/kernel_agent "
                      + bbcluster + " --suite torchbench --data " + hf_train
                      + " --backend kernel_agent --ops tanh.default --topn 1 --llm-attempts 2"
                      + " --kernel-agent-workers 1 --kernel-agent-max-rounds 1 --llm-model scripted"
                      + " --llm-base-url " + url + " --config " + dir / "fast.toml --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  CHECK_THAT(r.err, Catch::Contains("KernelAgent asks scripted through its relay provider at " + url));
  auto finished = finished_by_op(dir / "run/results.jsonl");
  REQUIRE(finished.size() == 1);
  CHECK(finished["aten.tanh.default"]["version"] == 2);
  CHECK(finished["aten.tanh.default"]["correctness"][0]["is_correct"] == true);

  // One request: v2's kernel seeds, to the model named, by the relay at the URL given.
  auto requests = requests_of(dir, "aten.tanh.default");
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["api"] == "relay");
  CHECK(requests[0]["model"] == "scripted");
  // The prompt holds v1's evaluation: the input it got wrong, checked first, with its errors.
  std::string wrong_input;
  for (auto& j : bb::test::journal_lines(dir / "run/results.jsonl", "version_evaluated"))
    if (j["version"] == 1)
      wrong_input = j["correctness"][0]["args"].get<std::string>();
  REQUIRE_FALSE(wrong_input.empty());
  auto prompt = requests[0]["prompt"].get<std::string>();
  CHECK_THAT(prompt, Catch::Contains("# The benchmark evaluated the previous kernel (version 1) and it was wrong."));
  CHECK_THAT(prompt, Catch::Contains("#   " + wrong_input + "\n#     max absolute error "));
  CHECK_THAT(prompt, Catch::Contains("PREVIOUSLY_FAILED = [\n    (r\"\"\"" + wrong_input));
  // KernelAgent's kernel prompt shows the test, never the problem description.
  CHECK(prompt.find("Implement a high-performance Triton kernel") == std::string::npos);
  CHECK(prompt.find("ADDITIONAL VALIDATION TEST") == std::string::npos); // bbcluster's test alone

  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  auto summary = bb::test::read_file((folder / "tanh__default/tanh__default_summary.txt").string());
  CHECK_THAT(summary, Catch::Contains("KernelAgent model: scripted\n"));
  CHECK_THAT(summary, Catch::Contains("KernelAgent provider: relay at " + url + "\n"));
  CHECK_THAT(summary, Catch::Contains("agent (scripted) worker 0, 1 rounds"));
  CHECK(names_in(folder / "agent_logs")
        == std::set<std::string>{"tanh__default_v1.log", "tanh__default_v1.request.json",
                                 "tanh__default_v1.result.json", "tanh__default_v2.log",
                                 "tanh__default_v2.request.json", "tanh__default_v2.result.json"});
}

TEST_CASE("kernel_agent: with generate_default_test the agent writes its own test first, from the "
          "only prompt that holds the problem description", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", std::string(fast_settings) + "generate_default_test = true\n");
  bb::test::write_file(dir / "agent.json", json{{"aten.relu.default", {"model"}}}.dump());
  auto own_test = "import sys\nimport torch\nfrom kernel import kernel_function\n\n"
                  "x = torch.rand(64) - 0.5\nsys.exit(0 if torch.equal(kernel_function(x), x.clamp(min=0)) else 1)\n";
  llm_server server(dir, json{{"aten.relu.default",
                               {{{"content", fence("python", own_test)}},
                                {{"content", fence("python", "import torch\n\ndef kernel_function(x):\n    return torch.clamp(x, min=0)\n")}}}}});
  // One of KernelAgent's OpenAI models, its provider named, an OpenAI-compatible server.
  auto r = run(dir, "OPENAI_API_KEY=" + api_key + " FAKE_AGENT_SCRIPT=" + dir / "agent.json" + " PYTHONPATH="
                      BB_SOURCE_DIR "/tests/kernel_agent " + bbcluster + " --suite torchbench --data " + hf_train
                      + " --backend kernel_agent --ops relu.default --topn 1 --kernel-agent-workers 1"
                      + " --llm-model o4-mini --llm-provider openai --llm-base-url http://127.0.0.1:"
                      + server.port + "/v1 --config " + dir / "fast.toml --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  auto requests = requests_of(dir, "aten.relu.default");
  REQUIRE(requests.size() == 2);
  for (auto& q : requests) {
    CHECK(q["api"] == "openai");
    CHECK(q["model"] == "o4-mini");
    CHECK(q["authorization_ok"] == true);
  }
  // First the agent's own test, from the problem description (bbcluster's test as a reference);
  // then the kernel, from both tests, bbcluster's as an additional validation test.
  auto test_prompt = requests[0]["prompt"].get<std::string>();
  CHECK_THAT(test_prompt, Catch::Contains("Implement a high-performance Triton kernel for the PyTorch operator relu.default"));
  CHECK_THAT(test_prompt, Catch::Contains("PREVIOUSLY_FAILED"));
  auto kernel_prompt = requests[1]["prompt"].get<std::string>();
  CHECK_THAT(kernel_prompt, Catch::Contains("x = torch.rand(64) - 0.5"));
  CHECK_THAT(kernel_prompt, Catch::Contains("ADDITIONAL VALIDATION TEST 1"));
  CHECK_THAT(kernel_prompt, Catch::Contains("OP = torch.ops.aten.relu.default"));
  CHECK(kernel_prompt.find("Implement a high-performance Triton kernel") == std::string::npos);
  auto folder = only_run_folder(dir / "run", "kernel_agent_run_");
  CHECK_THAT(bb::test::read_file((folder / "relu__default/relu__default_summary.txt").string()),
             Catch::Contains("KernelAgent writes its own test too: yes\n"));
  CHECK_FALSE(appears_under(dir / "run", api_key));
}

TEST_CASE("kernel_agent: without a provider for the model the campaign does not start, and says "
          "why in the agent's words and what to set", "[integration]") {
  bb::test::temp_dir dir;
  auto agent = "env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY -u OPENAI_MODEL -u LLM_RELAY_URL PYTHONPATH="
               BB_SOURCE_DIR "/tests/kernel_agent " + bbcluster + " --suite torchbench --data " + hf_train
               + " --backend kernel_agent --ops relu.default --topn 1 --log-dir " + dir / "run";
  // A model KernelAgent does not know goes to its relay; nothing answers at that address.
  auto relay = run(dir, agent + " --llm-model scripted --llm-base-url http://127.0.0.1:1");
  CHECK(relay.status == 2);
  CHECK_THAT(relay.err, Catch::Contains("KernelAgent has no provider for model 'scripted': No available "
                                        "provider for model 'scripted'. Tried providers: ['RelayProvider']"));
  CHECK_THAT(relay.err, Catch::Contains("LLM_RELAY_URL"));
  CHECK_THAT(relay.err, Catch::Contains("--llm-base-url"));
  CHECK_FALSE(fs::exists(dir / "run"));
  // KernelAgent's default model is Anthropic's, and wants its key.
  auto claude = run(dir, agent);
  CHECK(claude.status == 2);
  CHECK_THAT(claude.err, Catch::Contains("No available provider for model 'claude-sonnet-4-20250514'"));
  CHECK_THAT(claude.err, Catch::Contains("set ANTHROPIC_API_KEY"));
  // A provider KernelAgent does not use for the model.
  auto pinned = run(dir, agent + " --llm-model scripted --llm-provider openai");
  CHECK(pinned.status == 2);
  CHECK_THAT(pinned.err, Catch::Contains("Preferred provider 'OpenAIProvider' is not configured for model 'scripted'"));
  CHECK_THAT(pinned.err, Catch::Contains("--llm-provider names a provider"));
  CHECK_FALSE(fs::exists(dir / "run"));
}
