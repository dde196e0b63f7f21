#pragma once

// Correctness as torch.testing.assert_close(ref, res, atol, rtol, equal_nan=True) decides it.

#include <string>

#include <ATen/core/ivalue.h>

namespace bb::runner {

struct comparison {
  bool ok = true;
  /// Why not, in assert_close's words; empty when ok.
  std::string message;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
};

/// Compares a reference value with a result: tensors by shape, dtype, device and closeness;
/// lists and tuples recursively with equal lengths; numbers with the same tolerance; other
/// values by equality.
comparison compare(const c10::IValue& ref, const c10::IValue& res, double atol, double rtol);

} // namespace bb::runner
