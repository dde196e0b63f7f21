#pragma once

// The simulated cluster's model of work (bench/cluster.cpp, bench/sim_runner.cpp): what one
// input costs a simulated slot, in modelled seconds. Its call time is the tensor-bytes
// estimate the coordinator sizes shards by (suite/shards.hpp), off by a factor drawn once per
// operator (log-normal, sigma 1: operators differ in arithmetic intensity) and once per input
// (sigma 0.5), from a hash of their names: the coordinator's estimates are wrong as real ones
// are. The rest is the timer's budget for that call (expected_input_seconds): a cheap input
// costs do_bench's warm-up and repetition budgets on each side.

#include <string>

#include "messages/runner_protocol.hpp"
#include "suite/suite.hpp"

namespace bb::sim {

/// The "true" ms of one call of `input` of `op` on `device`.
double call_ms(const std::string& op, const std::string& input, const std::string& device);

/// Modelled seconds of one input: checked, and timed when `timed`.
double input_seconds(const std::string& op, const std::string& input, const runner_options& opts,
                     bool timed);

/// Modelled seconds of every input of an operator, as the runner goes through them.
double op_seconds(const op_inputs& op, const runner_options& opts);

} // namespace bb::sim
