#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "support.hpp"

using nlohmann::json;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

// One small input per operator of tests/kernels/adversarial.
std::string corpus_trace() {
  std::string out;
  for (auto op : {"relu.default", "abs.default", "neg.default", "exp.default", "sin.default",
                  "cos.default", "log.default", "sqrt.default", "tanh.default", "sigmoid.default",
                  "ceil.default", "floor.default", "trunc.default", "clone.default",
                  "reciprocal.default", "sign.default", "round.default", "erf.default"})
    out += std::string("Operator: aten.") + op + "\ncnt: 1, ((T([4, 8], f32),), {})\n";
  return out;
}

struct expected {
  std::string outcome;
  /// The correctness record's error_type when the job ran, or a text the detail holds.
  std::string detail;
  std::string flag;
};

} // namespace

TEST_CASE("a sweep over the adversarial corpus: every kernel gets its outcome, nothing is lost",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "corpus.txt", corpus_trace());
  bb::test::write_file(dir / "settings.toml",
                       "[evaluator]\ncall_timeout_s = 3.0\njob_timeout_s = 60.0\nmax_attempts = 2\n"
                       "[timing]\ncpu_warmup = 1\ncpu_runs = 3\n[compile]\ncache_dir = \"" BB_TEST_CACHE "\"\n");
  auto logs = dir / "run";
  auto line = bbcluster + " --suite torchbench --data " + dir / "corpus.txt"
              + " --backend directory --ops-directory " BB_SOURCE_DIR "/tests/kernels/adversarial"
              " --devices 2 --config " + dir / "settings.toml" + " --log-dir " + logs
              + " >" + dir / "stdout" + " 2>" + dir / "stderr" + " </dev/null";
  // A secret in the environment must never reach kernel code.
  ::setenv("BBCLUSTER_TEST_API_KEY", "sk-do-not-leak", 1);
  int raw = std::system(line.c_str());
  ::unsetenv("BBCLUSTER_TEST_API_KEY");
  auto err = bb::test::read_file(dir / "stderr");
  INFO(err.substr(err.size() > 6000 ? err.size() - 6000 : 0));
  REQUIRE(WIFEXITED(raw));
  REQUIRE(WEXITSTATUS(raw) == 0);

  std::map<std::string, json> jobs;
  std::istringstream journal(bb::test::read_file(logs + "/results.jsonl"));
  size_t requeued = 0;
  for (std::string l; std::getline(journal, l);) {
    auto j = json::parse(l);
    if (j["event"] == "job_requeued") {
      ++requeued;
      continue;
    }
    auto op = j["op_name"].get<std::string>();
    CHECK(jobs.count(op) == 0); // exactly one terminal line per job
    jobs[op] = j;
  }
  std::map<std::string, expected> want = {
    {"aten.relu.default", {"crashed", "SIGSEGV", ""}},
    {"aten.abs.default", {"crashed", "SIGABRT", ""}},
    {"aten.neg.default", {"crashed", "exited with status 0", ""}},
    {"aten.exp.default", {"ok", "exception", ""}},
    {"aten.sin.default", {"timed_out", "call timeout", ""}},
    {"aten.cos.default", {"timed_out", "call timeout", ""}},
    {"aten.log.default", {"ok", "oom", ""}},
    {"aten.sqrt.default", {"ok", "", ""}},
    {"aten.tanh.default", {"ok", "ValueError", ""}},
    {"aten.sigmoid.default", {"ok", "incorrect", ""}},
    {"aten.ceil.default", {"ok", "incorrect", ""}},
    {"aten.floor.default", {"ok", "incorrect", ""}},
    {"aten.trunc.default", {"ok", "mutates_input", "mutates_input"}},
    {"aten.clone.default", {"ok", "aliases_input", "aliases_input"}},
    {"aten.reciprocal.default", {"crashed", "exited with status 0", ""}},
    {"aten.sign.default", {"crashed", "SIGSEGV", ""}},
    {"aten.round.default", {"ok", "replaces_timer", "replaces_timer"}},
    {"aten.erf.default", {"ok", "uses_cuda_stream", "uses_cuda_stream"}},
  };
  CHECK(jobs.size() == want.size());
  // Each of the 7 jobs that failed as a whole was requeued once, and the journal says so.
  CHECK(requeued == 7);
  for (auto& [op, w] : want) {
    INFO(op);
    REQUIRE(jobs.count(op) == 1);
    auto& j = jobs[op];
    INFO(j.dump().substr(0, 1500));
    CHECK(j["outcome"] == w.outcome);
    if (w.outcome != "ok") {
      CHECK(j["detail"].get<std::string>().find(w.detail) != std::string::npos);
      CHECK(j["attempt"] == 2); // retried once on a fresh runner
    } else if (w.detail.empty()) {
      CHECK(j["correctness"][0]["is_correct"] == true);
    } else {
      CHECK(j["correctness"][0]["is_correct"] == false);
      CHECK(j["correctness"][0]["error_type"] == w.detail);
    }
    if (!w.flag.empty())
      CHECK(j["flags"] == json::array({w.flag}));
  }
  // A kernel's fault is told with where it happened, from bbrunner's handler in the runner's log:
  // the null write's address, the instruction's module, and what bbrunner was doing.
  auto segv = jobs["aten.relu.default"]["detail"].get<std::string>();
  CHECK_THAT(segv, Catch::Contains("(its log: fatal signal 11 at address 0x0000000000000000, instruction 0x"));
  CHECK_THAT(segv, Catch::Contains("bbrunner was evaluating a job"));
  CHECK(jobs["aten.sigmoid.default"]["correctness"][0]["error_msg"].get<std::string>().find("'shape'")
        != std::string::npos);
  CHECK(jobs["aten.ceil.default"]["correctness"][0]["error_msg"].get<std::string>().find("'dtype'")
        != std::string::npos);

  // Restarts are counted and reported (a runner is replaced when the next job needs it).
  size_t restarts = 0;
  for (auto& [op, j] : jobs)
    restarts += j["runner_restarts"].get<size_t>();
  CHECK(restarts >= 7); // at least one fresh runner for each retry of the 7 jobs that failed whole
  auto md = bb::test::read_file(logs + "/OVERALL_SUMMARY.md");
  CHECK(md.find("18 jobs: crashed 5, ok 11, timed_out 2") != std::string::npos);
  CHECK(md.find(std::to_string(restarts) + " runner restarts") != std::string::npos);

  // Kernel output went to the runner logs, the secret nowhere.
  std::string logs_text;
  for (auto& e : std::filesystem::directory_iterator(logs + "/runner_logs"))
    logs_text += bb::test::read_file(e.path().string());
  CHECK(logs_text.find("garbage garbage") != std::string::npos);
  CHECK(logs_text.find("sk-do-not-leak") == std::string::npos);
}
