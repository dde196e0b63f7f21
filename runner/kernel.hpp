#pragma once

// The kernel under evaluation, whatever it is made of: the aten operator itself, a native
// object built from .cpp/.cu, or a Python function. Inputs, reference, checks and timer are
// the same for all of them.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include "messages/records.hpp"
#include "runner/inputs.hpp"

namespace bb::runner {

/// One input ready for calls: fresh clones, as a normalized dispatcher stack and, for
/// kernels that take them (Python), as the call's own args and kwargs.
struct prepared_input {
  std::vector<c10::IValue> stack;
  std::vector<c10::IValue> args;
  std::unordered_map<std::string, c10::IValue> kwargs;
};

class kernel {
public:
  virtual ~kernel() = default;
  /// True when calls take the call's own args and kwargs rather than a normalized stack.
  virtual bool takes_call_args() const {
    return false;
  }
  /// Calls once on `in` (whose tensors an in-place op mutates) and returns the result: one
  /// value, or a tuple for several returns.
  virtual c10::IValue call(prepared_input& in) const = 0;
};

/// Clones `call` into a prepared input for `k` (and for the reference when `k` is null).
prepared_input prepare(const built_call& call, const c10::FunctionSchema& schema, const kernel* k);

/// A prepared input for `k` that shares `call`'s tensors (no clones): two kernels can take
/// turns on the same buffers.
prepared_input prepare_shared(const built_call& call, const c10::FunctionSchema& schema, const kernel* k);

/// The operator itself, through the dispatcher (the aten backend and the reference).
std::unique_ptr<kernel> make_aten_kernel(const c10::OperatorHandle& op);

/// Loads the artefact's kernel for `op`. Throws kernel_load_error (native) or python_error
/// (Python) with what went wrong.
std::unique_ptr<kernel> load_kernel(const artefact& a, const c10::OperatorHandle& op);

/// The value an op call leaves on the stack: one return, or a tuple of several.
c10::IValue result_of(std::vector<c10::IValue>& stack);

} // namespace bb::runner
