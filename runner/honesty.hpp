#pragma once

// Honesty checks on a kernel's call: what BackendBench would be fooled by. Each failed check
// is a flag on the result and fails the input.

#include <string>
#include <vector>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "runner/inputs.hpp"
#include "runner/kernel.hpp"

namespace bb::runner {

/// Whether kernel source works on a CUDA stream of its own (BackendBench skips such kernels:
/// the timer measures the default stream only).
bool uses_cuda_stream(const std::string& source);

/// The arguments (by formal name) that a call changed although the schema does not mark them
/// as written: compared with their originals in `pristine`, bitwise, NaN equal to NaN.
std::vector<std::string> changed_inputs(const built_call& pristine, const prepared_input& after,
                                        const c10::FunctionSchema& schema, bool call_args);

/// The outputs of a call that share memory with an argument, as "output N shares memory with
/// argument NAME", unless the schema says the output aliases (a view or in-place op).
std::vector<std::string> aliased_inputs(const c10::IValue& result, const prepared_input& in,
                                        const c10::FunctionSchema& schema, bool call_args);

/// Whether two calls hold the same tensors, bitwise (NaN equal to NaN), and the same arguments.
bool same_call(const built_call& a, const built_call& b);

/// What `kernel` did that `reference` did not, on the same input: a kernel may do what the
/// operator itself does.
std::vector<std::string> beyond_reference(const std::vector<std::string>& kernel,
                                          const std::vector<std::string>& reference);

} // namespace bb::runner
