#include <catch2/catch.hpp>

#include "results/progress_board.hpp"
#include "results/results.hpp"

using namespace bb;

namespace {

eval_result result_of(const std::string& op, bool correct, outcome o = outcome::ok) {
  eval_result r;
  r.op_name = op;
  r.outcome = o;
  correctness_record c;
  c.is_correct = correct;
  r.correctness.push_back(c);
  return r;
}

} // namespace

TEST_CASE("the progress board counts operators, inputs, slots and failures", "[results]") {
  progress_board board({{"aten.relu.default", 10}, {"aten.add.Tensor", 30}, {"aten.mm.default", 60}},
                       {result_of("aten.relu.default", true)});
  auto a = board.add_slot("local");
  auto b = board.add_slot("local");
  auto c = board.add_slot("node2");
  board.slot_busy(a, "add.Tensor");
  board.slot_busy(c, "mm.default");
  auto s = board.snapshot();
  CHECK(s.ops_total == 3);
  CHECK(s.ops_done == 1);
  CHECK(s.inputs_total == 100);
  CHECK(s.inputs_done == 10);
  // What a resumed sweep found done does not count towards this process's rate.
  CHECK(s.inputs_done_here == 0);
  CHECK(s.eta_s() < 0);

  auto block = render_progress_block(s, 200);
  REQUIRE(block.size() == 4);
  CHECK_THAT(block[0], Catch::StartsWith("bbcluster: 1/3 operators, 10/100 inputs, 0.0 inputs/s"));
  CHECK_THAT(block[0], Catch::Contains("time left unknown"));
  CHECK(block[1] == "  local: 1/2 slots busy:  add.Tensor");
  CHECK(block[2] == "  node2: 1/1 slots busy:  mm.default");
  CHECK(block[3] == "  failures: none");

  board.slot_idle(a);
  board.finished(result_of("aten.add.Tensor", false));
  board.slot_gone(b);
  s = board.snapshot();
  CHECK(s.ops_done == 2);
  CHECK(s.inputs_done == 40);
  CHECK(s.inputs_done_here == 30);
  CHECK(s.rate() > 0);
  CHECK(s.eta_s() >= 0);
  block = render_progress_block(s, 200);
  CHECK(block[1] == "  local: 0/2 slots busy (1 gone)");
  CHECK(block[3] == "  failures: incorrect 1");
  CHECK_THAT(block[0], Catch::Contains(" left"));

  board.finished(result_of("aten.mm.default", false, outcome::crashed));
  board.stopping("stopping: running jobs finish");
  s = board.snapshot();
  auto line = render_progress_line(s);
  CHECK_THAT(line, Catch::StartsWith("progress: 3/3 operators, 100/100 inputs, "));
  CHECK_THAT(line, Catch::Contains("stopping: running jobs finish"));
  CHECK_THAT(line, Catch::Contains("1/2 slots busy"));
  CHECK_THAT(line, Catch::EndsWith("failures: crashed 1, incorrect 1"));
}

TEST_CASE("a sharded operator's inputs count as its shards finish, each input once", "[results]") {
  progress_board board({{"aten.mm.default", 10}});
  auto shard = result_of("aten.mm.default", true);
  shard.shard = {0, 4, 10, 0, 4, 10};
  board.shard_finished(shard);
  CHECK(board.snapshot().inputs_done == 4);
  CHECK(board.snapshot().ops_done == 0);
  // The next version of a campaign runs the same shard again.
  shard.shard = {0, 8, 10, 0, 8, 10};
  board.shard_finished(shard);
  CHECK(board.snapshot().inputs_done == 10);
  board.finished(result_of("aten.mm.default", true));
  auto s = board.snapshot();
  CHECK(s.ops_done == 1);
  CHECK(s.inputs_done == 10);
  CHECK(s.inputs_done_here == 10);
}

TEST_CASE("each input counts as it ends, once, and its operator's or shard's result settles it",
          "[results]") {
  progress_board board({{"aten.conv.default", 2000}, {"aten.mm.default", 10}});
  for (uint64_t i = 0; i < 300; ++i)
    board.input_done("aten.conv.default", i);
  board.input_done("aten.conv.default", 7);    // a retried attempt streams it again
  board.input_done("aten.conv.default", 2000); // beyond the operator's inputs
  board.input_done("aten.nosuch.default", 0);  // not the sweep's
  auto s = board.snapshot();
  CHECK(s.inputs_done == 300);
  CHECK(s.inputs_done_here == 300);
  CHECK(s.ops_done == 0);
  CHECK(s.rate() > 0);
  // A shard's result counts its span for good; the inputs streamed from it are not counted twice.
  for (uint64_t i = 0; i < 6; ++i)
    board.input_done("aten.mm.default", i);
  auto shard = result_of("aten.mm.default", true);
  shard.shard = {0, 4, 10, 0, 4, 10};
  board.shard_finished(shard);
  CHECK(board.snapshot().inputs_done == 306);
  board.finished(result_of("aten.mm.default", true));
  board.finished(result_of("aten.conv.default", true));
  s = board.snapshot();
  CHECK(s.ops_done == 2);
  CHECK(s.inputs_done == 2010);
  CHECK(s.inputs_done_here == 2010);
}

TEST_CASE("the progress block fits the terminal's width", "[results]") {
  progress_board board({{"aten.relu.default", 1}});
  auto slot = board.add_slot("a-node-with-a-long-name");
  board.slot_busy(slot, "a_very_long_operator_name.with_an_overload");
  for (auto& line : render_progress_block(board.snapshot(), 30))
    CHECK(line.size() <= 30);
}

TEST_CASE("durations read as h:mm:ss or m:ss", "[results]") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(65) == "1:05");
  CHECK(format_duration(3600 + 62) == "1:01:02");
}

TEST_CASE("the board keeps each failed write once, in the order they came", "[results]") {
  progress_board board({{"aten.relu.default", 1}});
  CHECK(board.failed_writes().empty());
  board.write_failed("cannot append to /r/results.jsonl: No space left on device");
  board.write_failed("cannot write /r/profile.json: No space left on device");
  board.write_failed("cannot append to /r/results.jsonl: No space left on device");
  CHECK(board.failed_writes()
        == std::vector<std::string>{"cannot append to /r/results.jsonl: No space left on device",
                                    "cannot write /r/profile.json: No space left on device"});
}
