#pragma once

// Turns parsed call strings into dispatcher stacks, building tensors as
// torch.testing.make_tensor does (docs/architecture.md, "Inputs"), seeded from (op, input).

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>

#include "suite/args.hpp"

namespace bb::runner {

/// The positional and keyword IValues of one call.
struct built_call {
  std::vector<c10::IValue> args;
  std::unordered_map<std::string, c10::IValue> kwargs;
};

/// Seed for the tensors of one input: a 64-bit FNV-1a hash of op name and call string.
uint64_t input_seed(const std::string& op_name, const std::string& call_text);

/// The generator inputs are drawn from on `device`, seeded: the same seed gives the same
/// tensors on every node with the same kind of device (CPU and CUDA draw differently).
at::Generator make_input_generator(uint64_t seed, const at::Device& device);

/// Builds one tensor on `device` from `gen` (a generator of that device), as
/// torch.testing.make_tensor would.
at::Tensor make_tensor(const args::tensor_spec& spec, at::Generator& gen, const at::Device& device);

/// Builds every value of `call` against `schema`'s argument types. Throws c10::Error or
/// std::invalid_argument on a value the schema cannot take. On the CPU, the indices of
/// max_pool{2,3}d_with_indices_backward are taken modulo the input's plane, as aten's CPU
/// kernels write through them unchecked.
built_call build_call(const args::call& call, const c10::FunctionSchema& schema, uint64_t seed,
                      const at::Device& device);

/// A deep copy: every tensor cloned, containers rebuilt, so an in-place op cannot leak state.
c10::IValue clone_value(const c10::IValue& v);

/// A deep copy of a call: every tensor cloned.
built_call clone_call(const built_call& call);

/// The elements of a list (of tensors, optional tensors or anything) or a tuple; none for other
/// values.
std::optional<c10::ArrayRef<c10::IValue>> elements_of(const c10::IValue& v);

/// A value of the same structure as `v` with every strided tensor replaced by an uninitialized
/// one of its shape, dtype and device (a sparse tensor cloned): room for copy_value_into,
/// without the cost of a copy.
c10::IValue empty_value_like(const c10::IValue& v);

/// The same for every argument of a call.
built_call empty_call_like(const built_call& call);

/// Copies `src`'s tensors into `dst`'s, which were made by clone_value of a value of the same
/// structure: no allocation, so that a copy made between two timed calls leaves the allocator
/// as it was. Where the structure, a shape, a dtype or a device differs, `dst` becomes a clone
/// of `src` (an allocation) instead.
void copy_value_into(c10::IValue& dst, const c10::IValue& src);

/// The same for every argument of a call.
void copy_call_into(built_call& dst, const built_call& src);

/// The dispatcher stack for a call: clones of its arguments, kwargs and defaults normalized.
std::vector<c10::IValue> make_stack(const built_call& call, const c10::FunctionSchema& schema);

/// The dispatcher stack for a call that shares the call's tensors (no clones).
std::vector<c10::IValue> stack_of(const built_call& call, const c10::FunctionSchema& schema);

} // namespace bb::runner
