#pragma once

// Honesty checks on a kernel's call: what BackendBench would be fooled by. Each failed check
// is a flag on the result and fails the input.

#include <string>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "runner/inputs.hpp"
#include "runner/kernel.hpp"

namespace bb::runner {

/// Whether kernel source works on a CUDA stream of its own (BackendBench skips such kernels:
/// the timer measures the default stream only).
bool uses_cuda_stream(const std::string& source);

/// "" when the call left every input that the schema does not mark as written equal to the
/// original in `pristine` (bitwise, NaN equal to NaN); else which argument changed.
std::string changed_input(const built_call& pristine, const prepared_input& after,
                          const c10::FunctionSchema& schema, bool call_args);

/// "" unless the operator returns fresh tensors (no alias in its schema's returns) and
/// `result` shares storage with an input of `in`; else which.
std::string aliased_input(const c10::IValue& result, const prepared_input& in,
                          const c10::FunctionSchema& schema);

} // namespace bb::runner
