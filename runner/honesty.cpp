#include "runner/honesty.hpp"

#include <regex>
#include <vector>

#include <ATen/ATen.h>

namespace bb::runner {

namespace {

bool same_tensor_values(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
    return false;
  if (a.numel() == 0)
    return true;
  if (a.is_floating_point() || a.is_complex())
    return ((a == b) | (at::isnan(a) & at::isnan(b))).all().item<bool>();
  return at::equal(a, b);
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor())
    return same_tensor_values(a.toTensor(), b.toTensor());
  if (a.isList() && b.isList()) {
    auto x = a.toListRef();
    auto y = b.toListRef();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same_value(x[i], y[i]))
        return false;
    return true;
  }
  return true; // only tensors can be mutated
}

void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isList()) {
    for (const auto& x : v.toListRef())
      collect_tensors(x, out);
  } else if (v.isTuple()) {
    for (const auto& x : v.toTupleRef().elements())
      collect_tensors(x, out);
  }
}

} // namespace

bool uses_cuda_stream(const std::string& source) {
  static const std::regex patterns(
    R"(torch\.cuda\.Stream\s*\(|cuda\.stream\s*\(|\bStream\s*\(|getStreamFromPool|cudaStreamCreate|ExternalStream\s*\()",
    std::regex::icase);
  return std::regex_search(source, patterns);
}

std::string changed_input(const built_call& pristine, const prepared_input& after,
                          const c10::FunctionSchema& schema, bool call_args) {
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < formals.size(); ++i) {
    const auto& formal = formals[i];
    if (formal.alias_info() && formal.alias_info()->isWrite())
      continue; // in-place and out= arguments are meant to change
    const c10::IValue* before = nullptr;
    const c10::IValue* now = nullptr;
    if (i < pristine.args.size()) {
      before = &pristine.args[i];
    } else if (auto it = pristine.kwargs.find(formal.name()); it != pristine.kwargs.end()) {
      before = &it->second;
    }
    if (!call_args) {
      if (i < after.stack.size())
        now = &after.stack[i];
    } else if (i < after.args.size()) {
      now = &after.args[i];
    } else if (auto it = after.kwargs.find(formal.name()); it != after.kwargs.end()) {
      now = &it->second;
    }
    if (before && now && !same_value(*before, *now))
      return "argument " + std::to_string(i) + " (" + formal.name()
             + ") was changed by the kernel, but the operator does not write it";
  }
  return "";
}

std::string aliased_input(const c10::IValue& result, const prepared_input& in,
                          const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns())
    if (r.alias_info())
      return ""; // a view or in-place op returns an input by design
  std::vector<at::Tensor> outputs, inputs;
  collect_tensors(result, outputs);
  for (auto& v : in.stack)
    collect_tensors(v, inputs);
  for (auto& v : in.args)
    collect_tensors(v, inputs);
  for (auto& kv : in.kwargs)
    collect_tensors(kv.second, inputs);
  for (size_t o = 0; o < outputs.size(); ++o)
    for (auto& input : inputs)
      if (outputs[o].defined() && input.defined() && outputs[o].numel() > 0
          && outputs[o].storage().is_alias_of(input.storage()))
        return "output " + std::to_string(o)
               + " shares memory with an input, but the operator returns a new tensor";
  return "";
}

} // namespace bb::runner
