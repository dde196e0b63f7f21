#include "runner/honesty.hpp"

#include "runner/compare.hpp"

#include <algorithm>
#include <regex>

#include <ATen/ATen.h>

namespace bb::runner {

namespace {

bool same_tensor_values(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined())
    return false;
  if (!a.defined())
    return true;
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type() || a.layout() != b.layout())
    return false;
  if (a.is_sparse())
    return same_tensor_values(a._indices(), b._indices()) && same_tensor_values(a._values(), b._values());
  if (a.numel() == 0)
    return true;
  // Bitwise equal in one pass where no NaN differs (the common case); NaN equal to NaN else.
  if (known_equal(a, b))
    return true;
  if (a.is_floating_point() || a.is_complex())
    return ((a == b) | (at::isnan(a) & at::isnan(b))).all().item<bool>();
  return false;
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor())
    return same_tensor_values(a.toTensor(), b.toTensor());
  auto x = elements_of(a), y = elements_of(b);
  if (x && y) {
    if (x->size() != y->size())
      return false;
    for (size_t i = 0; i < x->size(); ++i)
      if (!same_value((*x)[i], (*y)[i]))
        return false;
    return true;
  }
  return true; // only tensors can be mutated
}

// The storages a value's tensors live in: a sparse tensor's are its indices' and values'.
void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined())
      return;
    if (t.is_sparse()) {
      out.push_back(t._indices());
      out.push_back(t._values());
    } else if (t.layout() == at::kStrided) {
      out.push_back(t);
    }
  } else if (v.isList()) {
    for (const auto& x : v.toListRef())
      collect_tensors(x, out);
  } else if (v.isTuple()) {
    for (const auto& x : v.toTupleRef().elements())
      collect_tensors(x, out);
  }
}

// The value a call received for formal `i` (by position or keyword).
const c10::IValue* argument(const prepared_input& in, const c10::FunctionSchema& schema, size_t i,
                            bool call_args) {
  const auto& formal = schema.arguments()[i];
  if (!call_args)
    return i < in.stack.size() ? &in.stack[i] : nullptr;
  if (i < in.args.size())
    return &in.args[i];
  auto it = in.kwargs.find(formal.name());
  return it == in.kwargs.end() ? nullptr : &it->second;
}

const c10::IValue* original(const built_call& call, const c10::FunctionSchema& schema, size_t i) {
  if (i < call.args.size())
    return &call.args[i];
  auto it = call.kwargs.find(schema.arguments()[i].name());
  return it == call.kwargs.end() ? nullptr : &it->second;
}

} // namespace

bool uses_cuda_stream(const std::string& source) {
  static const std::regex patterns(
    R"(torch\.cuda\.Stream\s*\(|cuda\.stream\s*\(|\bStream\s*\(|getStreamFromPool|cudaStreamCreate|ExternalStream\s*\()",
    std::regex::icase);
  return std::regex_search(source, patterns);
}

std::vector<std::string> changed_inputs(const built_call& pristine, const prepared_input& after,
                                        const c10::FunctionSchema& schema, bool call_args) {
  std::vector<std::string> out;
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < formals.size(); ++i) {
    if (formals[i].alias_info() && formals[i].alias_info()->isWrite())
      continue; // in-place and out= arguments are meant to change
    auto before = original(pristine, schema, i);
    auto now = argument(after, schema, i, call_args);
    if (before && now && !same_value(*before, *now))
      out.push_back("argument " + std::to_string(i) + " (" + formals[i].name()
                    + ") was changed, but the operator does not write it");
  }
  return out;
}

std::vector<std::string> aliased_inputs(const c10::IValue& result, const prepared_input& in,
                                        const c10::FunctionSchema& schema, bool call_args) {
  std::vector<std::string> out;
  for (const auto& r : schema.returns())
    if (r.alias_info())
      return out; // a view or in-place op returns an input by design
  std::vector<c10::IValue> outputs;
  if (result.isTuple())
    outputs = result.toTupleRef().elements().vec();
  else
    outputs.push_back(result);
  const auto& formals = schema.arguments();
  for (size_t o = 0; o < outputs.size(); ++o) {
    std::vector<at::Tensor> produced;
    collect_tensors(outputs[o], produced);
    for (size_t i = 0; i < formals.size(); ++i) {
      auto arg = argument(in, schema, i, call_args);
      if (!arg)
        continue;
      std::vector<at::Tensor> given;
      collect_tensors(*arg, given);
      bool shared = false;
      for (auto& p : produced)
        for (auto& g : given)
          shared = shared || (p.numel() > 0 && g.numel() > 0 && p.storage().is_alias_of(g.storage()));
      if (shared)
        out.push_back("output " + std::to_string(o) + " shares memory with argument "
                      + std::to_string(i) + " (" + formals[i].name() + ")");
    }
  }
  return out;
}

bool same_call(const built_call& a, const built_call& b) {
  if (a.args.size() != b.args.size() || a.kwargs.size() != b.kwargs.size())
    return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!same_value(a.args[i], b.args[i]))
      return false;
  for (auto& [name, v] : a.kwargs) {
    auto it = b.kwargs.find(name);
    if (it == b.kwargs.end() || !same_value(v, it->second))
      return false;
  }
  return true;
}

std::vector<std::string> beyond_reference(const std::vector<std::string>& kernel,
                                          const std::vector<std::string>& reference) {
  std::vector<std::string> out;
  for (auto& k : kernel)
    if (std::find(reference.begin(), reference.end(), k) == reference.end())
      out.push_back(k);
  return out;
}

} // namespace bb::runner
