#include <catch2/catch.hpp>

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

TEST_CASE("a sweep's record gives the arguments that resume it", "[core]") {
  test::temp_dir dir;
  REQUIRE(write_sweep_record(dir.path, {{"--suite", "torchbench", "--log-dir", "old", "--disable-output-logs",
                                         "--resume=x", "--topn", "2"},
                                        "/somewhere"})
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

TEST_CASE("a journal says which operators finished and which versions were evaluated", "[core]") {
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

TEST_CASE("appending to a journal cut short starts a new line", "[core]") {
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

TEST_CASE("a sweep's conditions are kept, and each change is named", "[core]") {
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
}

TEST_CASE("the resume command names this program and the run folder, quoted", "[core]") {
  auto plain = resume_command_for("/runs/a");
  CHECK_THAT(plain, Catch::EndsWith(" --resume /runs/a"));
  CHECK_THAT(plain, Catch::StartsWith("/"));
  CHECK_THAT(resume_command_for("/runs/it's here"), Catch::EndsWith(" --resume '/runs/it'\\''s here'"));
}
