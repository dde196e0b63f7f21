#pragma once

// Suites: the operators to evaluate and their inputs as call strings.

#include <string>
#include <vector>

namespace bb {

/// One operator of a suite with its correctness and performance inputs.
struct op_inputs {
  std::string op_name;
  std::vector<std::string> correctness;
  std::vector<std::string> performance;
};

struct suite {
  std::string name;
  std::vector<op_inputs> ops;
};

/// BackendBench's smoke suite: aten.relu.default on T([2], f32) and T([1024, 1024], f32).
suite smoke_suite();

/// The result of applying --ops to a suite.
struct op_selection {
  suite selected;
  /// One line per token that matched nothing, with the closest operator names.
  std::vector<std::string> warnings;
};

/// Keeps the operators matched by any token (all when `tokens` is empty).
op_selection select_ops(const suite& s, const std::vector<std::string>& tokens);

} // namespace bb
