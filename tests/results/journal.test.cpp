#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "results/journal.hpp"
#include "support.hpp"

using namespace bb;

TEST_CASE("journal lines round-trip every field", "[results]") {
  eval_result r;
  r.job_id = 42;
  r.attempt = 2;
  r.op_name = "aten.add.Tensor";
  r.outcome = bb::outcome::crashed;
  r.detail = "runner killed by signal 11 (SIGSEGV)";
  correctness_record c;
  c.op_name = r.op_name;
  c.args = "((T([2], f32), T([2], f32),), {})";
  c.is_correct = false;
  c.error_msg = "boom \"quoted\"\nline";
  c.error_type = "crashed";
  c.max_abs_error = 0.25;
  c.max_rel_error = 1e-3;
  r.correctness.push_back(c);
  performance_record p;
  p.op_name = r.op_name;
  p.args = c.args;
  p.speedup = 1.5;
  p.benchmark_time_ms = 0.2;
  p.reference_time_ms = 0.3;
  p.successfully_ran = true;
  r.performance.push_back(p);
  r.where = {"node1", "NVIDIA H200", "580.1", "2.11.0", "abc123", 0, "namespaces", {{"timing.rounds", "5"}}};
  r.wall_seconds = 1.25;

  auto line = journal_line(r);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find("\"event\":\"job_finished\"") != std::string::npos);
  auto back = parse_journal_line(line);
  CHECK(back.job_id == 42);
  CHECK(back.attempt == 2);
  CHECK(back.outcome == bb::outcome::crashed);
  CHECK(back.detail == r.detail);
  REQUIRE(back.correctness.size() == 1);
  CHECK(back.correctness[0].error_msg == c.error_msg);
  CHECK(back.correctness[0].max_abs_error == 0.25);
  REQUIRE(back.performance.size() == 1);
  CHECK(back.performance[0].speedup == 1.5);
  CHECK(back.performance[0].successfully_ran);
  CHECK(back.where.device == "NVIDIA H200");
  CHECK(back.where.artefact_hash == "abc123");
  CHECK(back.where.settings == std::map<std::string, std::string>{{"timing.rounds", "5"}});
  CHECK(back.wall_seconds == 1.25);
}

TEST_CASE("the journal writer appends one flushed line per result", "[results]") {
  bb::test::temp_dir dir;
  auto path = dir / "results.jsonl";
  {
    journal_writer w;
    REQUIRE(w.open(path));
    eval_result r;
    r.op_name = "aten.relu.default";
    REQUIRE(w.append(r));
    // Flushed: readable before the writer closes.
    std::ifstream in(path);
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK(parse_journal_line(line).op_name == "aten.relu.default");
    r.job_id = 2;
    REQUIRE(w.append(r));
  }
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line);)
    ++lines;
  CHECK(lines == 2);
}

TEST_CASE("a malformed journal line throws", "[results]") {
  CHECK_THROWS(parse_journal_line("{\"job_id\": 1}"));
  CHECK_THROWS(parse_journal_line("not json"));
}

TEST_CASE("a journal line that cannot be written whole is cut off again", "[results]") {
  bb::test::temp_dir dir;
  auto path = dir / "results.jsonl";
  eval_result r;
  r.op_name = "aten.relu.default";
  auto line = journal_line(r) + "\n";
  journal_writer w;
  REQUIRE(w.open(path));
  REQUIRE(w.append(r));
  {
    // Room for half of a second line: its half is written, then the write fails.
    bb::test::file_size_limit limit(line.size() + line.size() / 2);
    r.job_id = 2;
    CHECK_FALSE(w.append(r));
  }
  CHECK(w.error() == "cannot append to " + path + ": File too large");
  CHECK(bb::test::read_file(path) == line);
  r.job_id = 3;
  REQUIRE(w.append(r));
  std::istringstream in(bb::test::read_file(path));
  std::vector<uint64_t> ids;
  for (std::string text; std::getline(in, text);)
    ids.push_back(parse_journal_line(text).job_id);
  CHECK(ids == std::vector<uint64_t>{0, 3});
}

TEST_CASE("a journal that cannot be opened says where and why", "[results]") {
  bb::test::temp_dir dir;
  journal_writer w;
  CHECK_FALSE(w.open(dir / "no/such/results.jsonl"));
  CHECK(w.error() == "cannot open " + dir / "no/such/results.jsonl" + ": No such file or directory");
  CHECK_FALSE(w.is_open());
}
