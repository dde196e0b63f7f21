#pragma once

// How a sweep is split (docs/architecture.md, "Shards"): what each input of an operator is
// expected to cost a slot, and an operator's inputs cut into shards of bounded expected work.
// No actors and no torch: the coordinator plans with it, the simulated runner sleeps by it.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "messages/records.hpp"
#include "messages/runner_protocol.hpp"
#include "suite/suite.hpp"

namespace bb {

/// The ms one call of `call_text` is expected to take on `device` ("cpu" or "cuda") when
/// nothing was measured: a pass over its tensors and an output as large, at a memory bandwidth
/// typical of the device, and never less than a kernel launch.
double call_ms_from_bytes(const std::string& call_text, const std::string& device);

/// The seconds a slot is expected to spend on one input whose call takes `call_ms`, with the
/// timer of `opts` (runner/timing.cpp): building it, the correctness check (the reference, the
/// kernel, a comparison) and, when `timed`, both sides timed as the timer spends its budget.
/// On CUDA that is do_bench's five-call estimate, its warm-up and repetition budgets and an L2
/// flush before each timed call; on a CPU cpu_bench's warm-up and timed calls within
/// timing.cpu_max_seconds.
double expected_input_seconds(double call_ms, const runner_options& opts, bool timed);

/// Measured call times (ms) by (operator, input text), e.g. from the reference-time cache.
using known_call_times = std::map<std::pair<std::string, std::string>, double>;

/// An operator's inputs as units of work. When its correctness and performance inputs are one
/// list (torchbench) the runner checks and times each input in turn: unit i is input i of
/// both. Otherwise the units are the correctness inputs, then the performance inputs.
struct op_work {
  bool paired = false;
  uint32_t correctness = 0;
  uint32_t performance = 0;
  /// Expected seconds of each unit.
  std::vector<double> seconds;

  double total() const;
};

/// A run of units [begin, end) of one operator.
struct unit_range {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool operator==(const unit_range& o) const {
    return begin == o.begin && end == o.end;
  }
};

/// What each unit of `op` is expected to cost: its call time from `known` where measured, else
/// from its tensor bytes.
op_work estimate_work(const op_inputs& op, const runner_options& opts, const known_call_times& known);

/// The same number of units as `op` has, each of one second: a plan without estimates.
op_work uniform_work(const op_inputs& op);

/// The expected seconds of the units of `r`.
double seconds_of(const op_work& w, unit_range r);

/// The inputs of the units of `r`, as a job carries them.
shard_span span_of(const op_work& w, unit_range r);

/// The units an evaluated span covers (one run when paired; up to two otherwise).
std::vector<unit_range> units_of(const op_work& w, const shard_span& s);

/// The runs of units not in `done`, in order.
std::vector<unit_range> units_left(const op_work& w, const std::vector<unit_range>& done);

/// Cuts each run of `todo` into ceil(work / `target`) shards (at most one per unit) of nearly
/// equal expected work; a target of 0 or less leaves each run whole.
std::vector<unit_range> cut_shards(const op_work& w, const std::vector<unit_range>& todo, double target);

/// The first units of `r` whose expected seconds stay within `limit` (at least one unit).
unit_range head_within(const op_work& w, unit_range r, double limit);

/// A shard's inputs for logs: "inputs 101-200 of 1957" (and the performance inputs apart when
/// they are another list).
std::string span_text(const shard_span& s);

/// The target of cut_shards for a sweep: its expected makespan per slot divided by
/// `shards_per_slot` (scheduler.shards_per_slot), and at most `max_shard_seconds`
/// (scheduler.max_shard_s) when that is above 0, one slot included: a stop or a lost node
/// then costs at most a shard's work, and each shard's results reach the journal as it ends.
/// 0 (no cut) when `shards_per_slot` is 0, or on one slot without a cap.
double shard_target(double total_seconds, size_t slots, double shards_per_slot, double max_shard_seconds = 0.0);

} // namespace bb
