#pragma once

// Correctness as torch.testing.assert_close(ref, res, atol, rtol, equal_nan=True) decides it.

#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace bb::runner {

struct comparison {
  bool ok = true;
  /// Why not, in assert_close's words; empty when ok.
  std::string message;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
};

/// A fast test that two strided tensors of the same shape, dtype and device hold the same
/// values: on a CPU, dense ones with the same strides compared byte for byte (memcmp, many times faster than
/// at::equal for half precision); elsewhere at::equal. False says "not known equal" (a NaN, a
/// -0.0 against 0.0, another layout): the caller compares in full.
bool known_equal(const at::Tensor& a, const at::Tensor& b);

/// Compares a reference value with a result: tensors by shape, dtype, device and closeness;
/// lists and tuples recursively with equal lengths; numbers with the same tolerance; other
/// values by equality.
comparison compare(const c10::IValue& ref, const c10::IValue& res, double atol, double rtol);

} // namespace bb::runner
