#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "programs.hpp"
#include "skip.hpp"

using nlohmann::json;
using bb::test::children_named;
using bb::test::run;

namespace {

// The journal's terminal lines, or those of `event`.
std::vector<json> journal(const std::string& path, const std::string& event = "job_finished") {
  return bb::test::journal_lines(path, event);
}

const std::string bbcluster = BB_BIN_DIR "/bbcluster";

} // namespace

TEST_CASE("the smoke sweep prints BackendBench's scores and writes the five files",
          "[integration]") {
  bb::test::temp_dir dir;
  auto logs = dir / "run";
  auto r = run(dir, bbcluster + " --suite smoke --backend aten --log-dir " + logs);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK(r.out.find("performance score (geomean speedup over all operators): ") != std::string::npos);
  CHECK(r.out.find("perf@p score (rate of correct samples with a speedup greater than p, p=1.0): ")
        != std::string::npos);

  auto full = json::parse(bb::test::read_file(logs + "/full_results.json"));
  REQUIRE(full.size() == 2);
  for (auto& row : full) {
    CHECK(row["op_name"] == "relu.default");
    if (row["test_type"] == "correctness") {
      CHECK(row["args"] == "((T([2], f32),), {})");
      CHECK(row["is_correct"] == true);
      CHECK(row["max_abs_error"] == 0.0);
      for (auto key : {"error_msg", "error_type", "traceback", "max_rel_error"})
        CHECK(row.contains(key));
    } else {
      CHECK(row["args"] == "((T([1024, 1024], f32),), {})");
      CHECK(row["successfully_ran"] == true);
      CHECK(row["benchmark_time_ms"].get<double>() > 0.0);
      CHECK(row["reference_time_ms"].get<double>() > 0.0);
      CHECK(row["speedup"].get<double>() > 0.0);
    }
  }
  CHECK(json::parse(bb::test::read_file(logs + "/failed_tests.json")).empty());
  auto csv = bb::test::read_file(logs + "/operator_summary.csv");
  CHECK(csv.find("\nrelu.default,2,1,1,1,1,0,0,1.0,") != std::string::npos);
  auto md = bb::test::read_file(logs + "/OVERALL_SUMMARY.md");
  CHECK(md.find("| Correctness Score | 1.00 |") != std::string::npos);
  CHECK(md.find("bbcluster --suite smoke --backend aten") != std::string::npos);
  auto lines = journal(logs + "/results.jsonl");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["outcome"] == "ok");
  CHECK(lines[0]["provenance"]["device"] == "cpu");
  CHECK(lines[0]["provenance"]["torch_version"].get<std::string>().rfind("2.", 0) == 0);
}

TEST_CASE("a runner that dies on its job: the sweep finishes with the job crashed, retried once",
          "[integration]") {
  bb::test::temp_dir dir;
  auto logs = dir / "run";
  auto r = run(dir, "BBCLUSTER_TEST_KILL_RUNNER_ON=aten.relu.default " + bbcluster
                      + " --suite smoke --backend aten --log-dir " + logs);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 0.00\n") == 0);
  CHECK(r.err.find("retrying") != std::string::npos);
  auto lines = journal(logs + "/results.jsonl");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["outcome"] == "crashed");
  CHECK(lines[0]["attempt"] == 2);
  auto requeued = journal(logs + "/results.jsonl", "job_requeued");
  REQUIRE(requeued.size() == 1);
  CHECK(requeued[0]["attempt"] == 1);
  CHECK(requeued[0]["outcome"] == "crashed");
  CHECK(lines[0]["detail"].get<std::string>().rfind("runner killed by signal 9 (SIGKILL) during ", 0) == 0);
  auto failed = json::parse(bb::test::read_file(logs + "/failed_tests.json"));
  CHECK(failed.size() == 2);
}

TEST_CASE("killing the runner from outside mid-job marks the job crashed", "[integration]") {
  bb::test::temp_dir dir;
  auto logs = dir / "run";
  // A long job (many timed calls, one job: no bound on a shard) and no retry, so the kill
  // lands mid-job and is final; the runner bare, a child of bbcluster (the sandbox's own
  // deaths are the escape tests').
  bb::test::write_file(dir / "slow.toml",
                       "[evaluator]\nmax_attempts = 1\nsandbox = \"off\"\n[timing]\ncpu_warmup = 0\ncpu_runs = 2000000\ncpu_max_seconds = 0.0\n"
                       "[scheduler]\nmax_shard_s = 0\n");
  pid_t pid = ::fork();
  if (pid == 0) {
    auto out = dir / "stdout";
    std::freopen(out.c_str(), "w", stdout);
    auto err = dir / "stderr";
    std::freopen(err.c_str(), "w", stderr);
    ::execl(bbcluster.c_str(), "bbcluster", "--suite", "smoke", "--log-dir", logs.c_str(),
            "--config", (dir / "slow.toml").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::vector<pid_t> runners;
  for (int i = 0; i < 400 && runners.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    runners = children_named(pid, "bbrunner");
  }
  REQUIRE(runners.size() == 1);
  // Let it take the job (its scratch folder is made when the runner has started and is
  // handed the job: on a loaded machine a runner can take seconds to start) and start timing.
  auto scratch = logs + "/scratch/slot0/job1_1";
  for (int i = 0; i < 600 && !std::filesystem::exists(scratch); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(std::filesystem::exists(scratch));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(runners[0], SIGKILL);
  int status = 0;
  for (int i = 0; i < 600; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  auto lines = journal(logs + "/results.jsonl");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["outcome"] == "crashed");
  CHECK(lines[0]["detail"].get<std::string>().rfind("runner killed by signal 9 (SIGKILL) during ", 0) == 0);
  CHECK(bb::test::read_file(dir / "stdout").find("correctness score (mean pass rate over all operators): 0.00") == 0);
}

TEST_CASE("bad command lines exit 2 with a one-line reason", "[integration]") {
  bb::test::temp_dir dir;
  auto unknown = run(dir, bbcluster + " --no-such-flag");
  CHECK(unknown.status == 2);
  CHECK(std::count(unknown.err.begin(), unknown.err.end(), '\n') == 1);
  CHECK(unknown.err.find("--no-such-flag") != std::string::npos);
  auto bad_suite = run(dir, bbcluster + " --suite facto");
  CHECK(bad_suite.status == 2);
  CHECK(bad_suite.err.find("facto") != std::string::npos);
  auto bad_p = run(dir, bbcluster + " --p -1");
  CHECK(bad_p.status == 2);
  bb::test::write_file(dir / "bad.toml", "[evaluator]\njob_timeout_s = \"long\"\n");
  auto bad_config = run(dir, bbcluster + " --config " + dir / "bad.toml");
  CHECK(bad_config.status == 2);
  CHECK(bad_config.err.find("bad.toml:2:1: key 'evaluator.job_timeout_s' must be a number")
        != std::string::npos);
  auto bad_set = run(dir, bbcluster + " --set evaluator.call_timeout_s=1e308 --list");
  CHECK(bad_set.status == 2);
  CHECK(bad_set.err.find("--set evaluator.call_timeout_s=1e308: evaluator.call_timeout_s must be "
                         "a finite number of seconds in (0, 604800], not 1e+308")
        != std::string::npos);
  auto no_value = run(dir, bbcluster + " --set timing.rounds --list");
  CHECK(no_value.status == 2);
  CHECK(no_value.err.find("give KEY=VALUE") != std::string::npos);
}

TEST_CASE("bbcluster settings prints default.toml and the README's table", "[integration]") {
  bb::test::temp_dir dir;
  auto toml = run(dir, bbcluster + " settings toml");
  CHECK(toml.status == 0);
  CHECK(toml.out == bb::test::read_file(BB_SOURCE_DIR "/configs/default.toml"));
  auto markdown = run(dir, bbcluster + " settings markdown");
  CHECK(markdown.status == 0);
  CHECK(markdown.out == bb::settings_markdown());
  CHECK(run(dir, bbcluster + " settings yaml").status == 2);
}

TEST_CASE("the help lists BackendBench's flags and ours", "[integration]") {
  bb::test::temp_dir dir;
  auto help = run(dir, bbcluster + " --help");
  CHECK(help.status == 0);
  for (auto flag : {"--suite", "--backend", "--ops", "--topn", "--llm-attempts", "--llm-model",
                    "--kernel-agent-workers", "--kernel-agent-max-rounds", "--ops-directory",
                    "--log-dir", "--disable-output-logs", "--p", "--log-level", "--data",
                    "--nodes", "--config", "--resume", "--devices", "--llm-provider",
                    "--llm-base-url", "--llm-dsl", "--kernel-agent-python", "--no-exploit-checks",
                    "--extra-inputs", "--set"})
    CHECK(help.out.find(flag) != std::string::npos);
  // Each flag the list of settings names for a key is one the command line takes.
  auto lists = [&](const std::string& flag) {
    for (auto at = help.out.find(flag); at != std::string::npos; at = help.out.find(flag, at + 1)) {
      char next = at + flag.size() < help.out.size() ? help.out[at + flag.size()] : ' ';
      if (next != '-' && !std::isalnum(static_cast<unsigned char>(next)))
        return true;
    }
    return false;
  };
  for (auto& d : bb::setting_docs()) {
    if (d.flag.empty())
      continue;
    INFO(d.key << ": " << d.flag);
    CHECK(lists(d.flag));
  }
  CHECK_FALSE(lists("--no-such"));
}

TEST_CASE("disabling output logs writes nothing and --devices runs several slots", "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, "cd " + dir.path + " && " + bbcluster + " --disable-output-logs --devices 2");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    entries += e.path().filename().string().rfind("backendbench_output_", 0) == 0;
  CHECK(entries == 0);
  CHECK(r.err.find("over 2 evaluators") != std::string::npos);
}

TEST_CASE("the cudagraph timer is the sweep's, and a CPU slot times with cpu_bench and says so",
          "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, "cd " + dir.path + " && " + bbcluster
                      + " --suite smoke --timer cudagraph --set timing.cpu_runs=5 --set evaluator.device=cpu"
                        " --log-dir run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto record = json::parse(bb::test::read_file(dir / "run/sweep.json"));
  CHECK(record["conditions"]["timing.timer"] == "cudagraph");
  auto done = journal(dir / "run/results.jsonl");
  REQUIRE(done.size() == 1);
  REQUIRE(done[0]["performance"].size() == 1);
  CHECK(done[0]["performance"][0]["timer"] == "cpu_bench");
  CHECK(done[0]["performance"][0]["successfully_ran"] == true);
  // An outlier measured again on a CPU is still cpu_bench's (every CPU call is synchronous).
  auto again = run(dir, "cd " + dir.path + " && " + bbcluster
                          + " --suite smoke --set timing.cpu_runs=5 --set evaluator.device=cpu"
                            " --set checks.suspicious_speedup=0.001 --log-dir again");
  INFO(again.err);
  REQUIRE(again.status == 0);
  auto checked = journal(dir / "again/results.jsonl");
  REQUIRE(checked.size() == 1);
  CHECK(checked[0]["flags"] == json::array({"suspicious_speedup"}));
  REQUIRE(checked[0]["performance"].size() == 1);
  CHECK(checked[0]["performance"][0]["unverified_speedup"] > 0.0);
  CHECK(checked[0]["performance"][0]["timer"] == "cpu_bench");
  auto bad = run(dir, bbcluster + " --suite smoke --timer graphs");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Catch::Contains("cudagraph"));
}

TEST_CASE("the progress line counts each input as it ends, before its operator ends", "[integration]") {
  bb::test::temp_dir dir;
  std::string trace = "Operator: aten.relu.default\n";
  for (int i = 0; i < 20; ++i)
    trace += "cnt: 1, ((T([" + std::to_string(1024 + i) + ", 1024], f32),), {})\n";
  bb::test::write_file(dir / "relu.txt", trace);
  auto r = run(dir, "cd " + dir.path + " && " + bbcluster
                      + " --suite torchbench --data relu.txt --set progress.interval_s=0.5"
                        " --set timing.cpu_runs=100 --log-dir run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  // One operator of 20 inputs: while it runs, the line counts its inputs as they end.
  bool partial = false;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("progress: 0/1 operators, ");
    if (at == std::string::npos)
      continue;
    auto done = std::atoi(line.c_str() + at + std::string("progress: 0/1 operators, ").size());
    partial = partial || (done > 0 && done < 20);
  }
  CHECK(partial);
}

TEST_CASE("bbnode --check evaluates relu on every slot", "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, BB_BIN_DIR "/bbnode --check --devices 2");
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("slot 0: ok (cpu, torch 2.") != std::string::npos);
  CHECK(r.out.find("slot 1: ok (cpu, torch 2.") != std::string::npos);
}

TEST_CASE("resuming an interrupted sweep runs the rest and reports all of it", "[integration]") {
  bb::test::temp_dir dir;
  auto sweep = "cd " + dir.path + " && " + bbcluster + " --suite torchbench --data " BB_TRACES_DIR
               "/hf_train --ops relu.default,tanh.default,neg.default --topn 1 --log-dir run";
  auto first = run(dir, sweep);
  INFO(first.err);
  REQUIRE(first.status == 0);
  auto journal = dir / "run/results.jsonl";
  auto lines = bb::test::journal_lines(journal, "job_finished");
  REQUIRE(lines.size() == 3);
  // As if the sweep had been killed after two operators, in the middle of a line.
  bb::test::write_file(journal, lines[0].dump() + "\n" + lines[1].dump() + "\n{\"job_id\": 3, \"ev");
  auto interrupted = lines[2]["op_name"].get<std::string>();

  auto resumed = run(dir, "cd / && " + bbcluster + " --resume " + dir / "run");
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  CHECK_THAT(resumed.err, Catch::Contains("2 of 3 operators finished before"));
  CHECK_THAT(resumed.err, Catch::Contains("results.jsonl:3:")); // the torn line, named
  CHECK_THAT(resumed.err, Catch::Contains("coordinator: 1 operators over"));
  // The torn line stays, alone on its line; the resumed operator's result follows it whole.
  std::istringstream after(bb::test::read_file(journal));
  size_t torn = 0;
  std::vector<std::string> done;
  for (std::string line; std::getline(after, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded())
      ++torn;
    else if (j["event"] == "job_finished")
      done.push_back(j["op_name"]);
  }
  CHECK(torn == 1);
  REQUIRE(done.size() == 3);
  CHECK(done[2] == interrupted);
  auto summary = bb::test::read_file(dir / "run/operator_summary.csv");
  for (auto op : {"relu.default", "tanh.default", "neg.default"})
    CHECK_THAT(summary, Catch::Contains(op));
}

TEST_CASE("resume refuses a folder without a sweep, and flags beside it", "[integration]") {
  bb::test::temp_dir dir;
  auto none = run(dir, bbcluster + " --resume " + dir / "nothing");
  CHECK(none.status == 2);
  CHECK_THAT(none.err, Catch::Contains("sweep.json: missing"));
  auto extra = run(dir, bbcluster + " --resume " + dir.path + " --ops relu");
  CHECK(extra.status == 2);
  CHECK_THAT(extra.err, Catch::Contains("give no others"));
}

TEST_CASE("the README's first command: the smoke suite with the default run folder, a relative one",
          "[integration]") {
  bb::test::temp_dir dir;
  auto r = run(dir, "cd " + dir.path + " && " + bbcluster + " --suite smoke --backend aten");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00\n") == 0);
  CHECK(r.err.find("failed as a whole") == std::string::npos);
}

TEST_CASE("input that selects no operator exits 2 saying why", "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "empty.txt", "");
  auto empty = run(dir, bbcluster + " --suite torchbench --data " + dir / "empty.txt"
                          + " --backend aten --log-dir " + dir / "run1");
  CHECK(empty.status == 2);
  CHECK(empty.err.find("--data " + dir / "empty.txt" + " selects no operator: it holds no input")
        != std::string::npos);
  CHECK(empty.out.find("correctness score") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "run1/results.jsonl"));

  std::filesystem::create_directories(dir / "many");
  for (int i = 0; i < 10000; ++i)
    bb::test::write_file(dir / ("many/t" + std::to_string(i) + ".txt"), "");
  auto start = std::chrono::steady_clock::now();
  auto many = run(dir, bbcluster + " --suite torchbench --data " + dir / "many"
                         + " --backend aten --log-dir " + dir / "run2");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  CHECK(many.status == 2);
  CHECK(many.err.find("selects no operator: its 10000 trace files hold no input")
        != std::string::npos);

  auto ops = run(dir, bbcluster + " --suite smoke --ops nosuchop --backend aten --log-dir "
                        + dir / "run3");
  CHECK(ops.status == 2);
  CHECK(ops.err.find("--ops nosuchop selects none of the 1 operators of suite smoke")
        != std::string::npos);
  CHECK(ops.err.find("closest: aten.relu.default") != std::string::npos);
}

TEST_CASE("binary junk as --data exits 2, its bytes escaped, a few lines and a count",
          "[integration]") {
  bb::test::temp_dir dir;
  // 40 KiB of binary junk, alike on every machine: every byte value (escape and NUL among
  // them) in a scrambled order, a newline every 97 bytes (about 400 "lines").
  std::string program(40960, '\0');
  for (size_t i = 0; i < program.size(); ++i)
    program[i] = i % 97 == 96 ? '\n' : static_cast<char>((i * 167 + (i >> 8)) & 0xff);
  bb::test::write_file(dir / "junk.txt", program);
  auto lines = static_cast<size_t>(std::count(program.begin(), program.end(), '\n'));
  REQUIRE(lines > 20);
  auto junk = run(dir, bbcluster + " --suite torchbench --data " + dir / "junk.txt"
                         + " --backend aten --log-dir " + dir / "run");
  CHECK(junk.status == 2);
  INFO(junk.err.substr(0, 2000));
  CHECK(junk.err.find("selects no operator: none of its lines parse") != std::string::npos);
  size_t control = 0;
  for (char c : junk.err)
    control += static_cast<unsigned char>(c) < 0x20 && c != '\n';
  CHECK(control == 0);
  CHECK(junk.err.find("\\x00") != std::string::npos); // escaped, not dropped
  CHECK(std::count(junk.err.begin(), junk.err.end(), '\n') <= 10);
  CHECK(junk.err.find("more lines that do not parse") != std::string::npos);
  // The same junk as a hostfile: refused before any node starts, alike escaped and cut short.
  auto hosts = run(dir, bbcluster + " --suite smoke --nodes " + dir / "junk.txt" + " --launcher local --log-dir "
                          + dir / "hosts-run");
  INFO(hosts.err.substr(0, 2000));
  CHECK(hosts.status == 2);
  control = 0;
  for (char c : hosts.err)
    control += static_cast<unsigned char>(c) < 0x20 && c != '\n';
  CHECK(control == 0);
  CHECK(hosts.err.find("junk.txt:1: ") != std::string::npos);
  CHECK(hosts.err.find("\\x00") != std::string::npos);
  CHECK(std::count(hosts.err.begin(), hosts.err.end(), '\n') <= 10);
  CHECK(hosts.err.find("... and ") != std::string::npos);
  CHECK(hosts.err.find(" more errors") != std::string::npos);
}

TEST_CASE("a sweep whose run folder fills up ends non-zero naming the files not written",
          "[integration]") {
  if (::geteuid() != 0)
    BB_SKIP("needs root to mount a small tmpfs in a private mount namespace");
  bb::test::temp_dir dir;
  auto mnt = dir / "disk";
  std::filesystem::create_directories(mnt);
  auto probe = run(dir, "unshare -m sh -c 'mount -t tmpfs -o size=24k tmpfs " + mnt + "'");
  if (probe.status != 0)
    BB_SKIP("cannot mount a tmpfs in a private mount namespace: " << probe.err);
  // 24 KiB: the run folder's lock, sweep.json, the first report.html, the journal's line and
  // the operator's record fit; the reports do not. The folder is copied out before the
  // namespace, and its tmpfs, go.
  auto r = run(dir, "unshare -m sh -c 'mount -t tmpfs -o size=24k tmpfs " + mnt + " && "
                      + bbcluster + " --suite smoke --backend aten --log-dir " + mnt + "/run; "
                      + "rc=$?; cp -a " + mnt + "/run " + dir / "after" + "; exit $rc'");
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("cannot write " + mnt + "/run/full_results.json: No space left on device")
        != std::string::npos);
  CHECK(r.err.find("profile.json has them all") == std::string::npos);
  auto last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  CHECK_THAT(last, Catch::StartsWith("bbcluster: the sweep's records are incomplete, "));
  CHECK(last.find("No space left on device") != std::string::npos);
  // What could be written was: the journal holds the operator's whole line.
  REQUIRE(std::filesystem::exists(dir / "after/results.jsonl"));
  CHECK(journal(dir / "after/results.jsonl").size() == 1);
  CHECK_FALSE(std::filesystem::exists(dir / "after/full_results.json"));
  for (auto& e : std::filesystem::recursive_directory_iterator(dir / "after")) {
    INFO(e.path());
    CHECK(e.path().extension() != ".tmp");
    if (e.is_regular_file())
      CHECK(bb::test::read_file(e.path()).find("Running") == std::string::npos);
  }
}
