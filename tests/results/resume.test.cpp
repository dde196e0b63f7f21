#include <catch2/catch.hpp>

#include <algorithm>

#include "results/journal.hpp"
#include "results/resume.hpp"
#include "support.hpp"

using namespace bb;

namespace {

eval_result result_of(const std::string& op, uint32_t version, bool correct) {
  eval_result r;
  r.op_name = op;
  r.version = version;
  correctness_record c;
  c.is_correct = correct;
  r.correctness.push_back(c);
  return r;
}

} // namespace

TEST_CASE("a sweep's record gives the arguments that resume it", "[results]") {
  test::temp_dir dir;
  REQUIRE(write_sweep_record(dir.path, {{"--suite", "torchbench", "--log-dir", "old", "--disable-output-logs",
                                         "--resume=x", "--topn", "2"},
                                        "/somewhere", {}})
            .empty());
  sweep_record r;
  REQUIRE(read_sweep_record(dir.path, r).empty());
  CHECK(r.cwd == "/somewhere");
  CHECK(resume_args(r, "/abs/run", {"--log-level", "debug"})
        == std::vector<std::string>{"--suite", "torchbench", "--topn", "2", "--log-dir", "/abs/run",
                                    "--resume", "/abs/run", "--log-level", "debug"});
  sweep_record missing;
  CHECK_THAT(read_sweep_record(dir / "nope", missing), Catch::Contains("sweep.json: missing"));
}

TEST_CASE("a journal says which operators finished and which versions were evaluated", "[results]") {
  test::temp_dir dir;
  auto path = dir / "results.jsonl";
  std::string text = journal_line(result_of("aten.relu.default", 1, true), "version_evaluated") + "\n"
                     + journal_line(result_of("aten.relu.default", 1, true)) + "\n"
                     + journal_line(result_of("aten.tanh.default", 1, false), "version_evaluated") + "\n"
                     + journal_line(result_of("aten.tanh.default", 2, false), "version_evaluated") + "\n"
                     + journal_line(result_of("aten.tanh.default", 2, true), "version_evaluated") + "\n"
                     + journal_line(result_of("aten.neg.default", 1, false), "job_requeued") + "\n"
                     + "{\"job_id\": 4, \"eve";
  test::write_file(path, text);
  journal_state st;
  REQUIRE(read_journal_state(path, st).empty());
  REQUIRE(st.finished.size() == 1);
  CHECK(st.finished.count("aten.relu.default") == 1);
  REQUIRE(st.versions["aten.tanh.default"].size() == 2);
  // A version evaluated again (after a restart) replaces its earlier line.
  CHECK(st.versions["aten.tanh.default"][1].correctness[0].is_correct);
  CHECK(st.versions.count("aten.neg.default") == 0);
  REQUIRE(st.problems.size() == 1);
  CHECK_THAT(st.problems[0], Catch::StartsWith(path + ":7: "));
}

TEST_CASE("appending to a journal cut short starts a new line", "[results]") {
  test::temp_dir dir;
  auto path = dir / "results.jsonl";
  test::write_file(path, "{\"job_id\": 1, \"ev");
  {
    journal_writer w;
    REQUIRE(w.open(path));
    REQUIRE(w.append(result_of("aten.relu.default", 0, true)));
  }
  journal_state st;
  REQUIRE(read_journal_state(path, st).empty());
  CHECK(st.finished.count("aten.relu.default") == 1);
  CHECK(st.problems.size() == 1);
}

TEST_CASE("a sweep's conditions are kept, and each change is named", "[results]") {
  test::temp_dir dir;
  std::map<std::string, std::string> then = {{"torch version", "2.11.0"},
                                             {"device", "cpu"},
                                             {"timing.cpu_runs", "100"},
                                             {"kernel k/relu__default/relu__default_implementation_v1.py", "aa"}};
  REQUIRE(write_sweep_record(dir.path, {{"--suite", "smoke"}, "/somewhere", then}).empty());
  sweep_record r;
  REQUIRE(read_sweep_record(dir.path, r).empty());
  CHECK(r.conditions == then);
  CHECK(changed_conditions(then, then).empty());
  auto now = then;
  now["torch version"] = "2.12.0";
  now["timing.cpu_runs"] = "5";
  now.erase("kernel k/relu__default/relu__default_implementation_v1.py");
  now["device"] = "cuda (NVIDIA H200)";
  CHECK(changed_conditions(then, now)
        == std::vector<std::string>{"device: cpu then, cuda (NVIDIA H200) now",
                                    "kernel k/relu__default/relu__default_implementation_v1.py: aa then, (none) now",
                                    "timing.cpu_runs: 100 then, 5 now",
                                    "torch version: 2.11.0 then, 2.12.0 now"});
  // Numbers compare by value.
  CHECK(changed_conditions({{"timing.cpu_max_seconds", "5"}}, {{"timing.cpu_max_seconds", "5.0"}}).empty());
  CHECK(changed_conditions({{"timing.cpu_max_seconds", "5"}}, {{"timing.cpu_max_seconds", "5.5"}}).size() == 1);
  // A sweep.json of format 1 recorded a dozen settings and the coordinator's device: what it
  // did not record is no change, a kernel it lacks is, and so is a setting it recorded.
  std::map<std::string, std::string> old_form = {{"torch version", "2.11.0"}, {"device", "cpu"},
                                                 {"timing.cpu_runs", "100"}};
  std::map<std::string, std::string> over_nodes = {{"torch version", "each node's own (every result names its node's)"},
                                                   {"device", "each node's own (every result names its node's)"},
                                                   {"timing.cpu_runs", "100"},
                                                   {"evaluator.job_timeout_s", "600.0"}};
  CHECK(changed_conditions(old_form, over_nodes, 1).empty());
  CHECK(changed_conditions(old_form, over_nodes, 2).size() == 3);
  over_nodes["timing.cpu_runs"] = "4";
  over_nodes["kernel k/a.py"] = "bb";
  CHECK(changed_conditions(old_form, over_nodes, 1)
        == std::vector<std::string>{"kernel k/a.py: (none) then, bb now", "timing.cpu_runs: 100 then, 4 now"});
}

TEST_CASE("the resume command names this program and the run folder, quoted", "[results]") {
  auto plain = resume_command_for("/runs/a");
  CHECK_THAT(plain, Catch::EndsWith(" --resume /runs/a"));
  CHECK_THAT(plain, Catch::StartsWith("/"));
  CHECK_THAT(resume_command_for("/runs/it's here"), Catch::EndsWith(" --resume '/runs/it'\\''s here'"));
}

TEST_CASE("a resumed sweep records the command it was started with, runnable as it stands", "[results]") {
  sweep_record r;
  r.args = {"--suite", "torchbench", "--ops", "relu,tanh", "--log-dir", "my runs/a", "--p", ""};
  CHECK(recorded_command(r) == "bbcluster --suite torchbench --ops relu,tanh --log-dir 'my runs/a' --p ''");
  CHECK(shell_command("/opt/bb cluster/bbcluster", {"--data", "$HOME/t*.txt"})
        == "'/opt/bb cluster/bbcluster' --data '$HOME/t*.txt'");
  // Never the expansion --resume runs (--log-dir X --resume X), which is refused if run again.
  auto resumed = resume_args(r, "/abs/run", {});
  CHECK(std::count(resumed.begin(), resumed.end(), "--resume") == 1);
  CHECK_THAT(recorded_command(r), !Catch::Contains("--resume"));
}

namespace {

eval_result shard_line(uint32_t begin, uint32_t n, uint32_t total) {
  eval_result r;
  r.op_name = "aten.a.default";
  r.shard = {begin, n, total, begin, n, total};
  for (auto i = begin; i < begin + n; ++i) {
    correctness_record c;
    c.args = "x" + std::to_string(i);
    r.correctness.push_back(c);
  }
  return r;
}

} // namespace

TEST_CASE("a journal keeps each shard's place, and a resume takes up each input once", "[results]") {
  test::temp_dir dir;
  {
    journal_writer j;
    REQUIRE(j.open(dir / "results.jsonl"));
    REQUIRE(j.append(shard_line(0, 2, 6), "shard_finished"));
    REQUIRE(j.append(shard_line(4, 2, 6), "shard_finished"));
    // Again over input 4 (a later run's cut): left out. Of another kernel version: left out.
    REQUIRE(j.append(shard_line(3, 2, 6), "shard_finished"));
    auto versioned = shard_line(2, 2, 6);
    versioned.version = 2;
    REQUIRE(j.append(versioned, "shard_finished"));
    eval_result whole;
    whole.op_name = "aten.b.default";
    REQUIRE(j.append(whole));
  }
  auto text = test::read_file(dir / "results.jsonl");
  // An operator evaluated as one job has the line it always had.
  CHECK(text.find("\"shard\"") < text.find("aten.b.default"));
  CHECK(text.substr(text.find("aten.b.default")).find("\"shard\"") == std::string::npos);
  journal_state st;
  REQUIRE(read_journal_state(dir / "results.jsonl", st).empty());
  REQUIRE(st.shards["aten.a.default"].size() == 4);
  CHECK(st.shards["aten.a.default"][1].shard.correctness_begin == 4);
  CHECK(st.finished.count("aten.b.default") == 1);
  std::vector<std::string> xs;
  for (int i = 0; i < 6; ++i)
    xs.push_back("x" + std::to_string(i));
  op_inputs op{"aten.a.default", xs, xs};
  auto kept = shards_to_keep(op, st.shards["aten.a.default"]);
  REQUIRE(kept.size() == 2);
  CHECK_FALSE(covers_every_input(op, kept));
  kept.push_back(shard_line(2, 2, 6));
  CHECK(covers_every_input(op, kept));
  // Lines of an operator whose inputs changed since are not taken up.
  op_inputs fewer{"aten.a.default", {"x0"}, {"x0"}};
  CHECK(shards_to_keep(fewer, st.shards["aten.a.default"]).empty());
}
