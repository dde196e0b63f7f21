#include "runner/inputs.hpp"

#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#ifdef BB_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif
#include <ATen/ScalarOps.h>
#include <ATen/core/jit_type.h>

namespace bb::runner {

namespace {

using args::value;

at::ScalarType scalar_type_of(const std::string& short_name) {
  static const std::pair<const char*, at::ScalarType> table[] = {
    {"bf16", at::kBFloat16},    {"f16", at::kHalf},        {"f32", at::kFloat},
    {"f64", at::kDouble},       {"c32", at::kComplexHalf}, {"c64", at::kComplexFloat},
    {"c128", at::kComplexDouble}, {"i8", at::kChar},       {"i16", at::kShort},
    {"i32", at::kInt},          {"i64", at::kLong},        {"b8", at::kBool},
    {"u8", at::kByte}};
  for (auto& [name, type] : table)
    if (short_name == name)
      return type;
  throw std::invalid_argument("unknown dtype '" + short_name + "'");
}

// torch.NAME values: dtypes, memory formats and layouts.
c10::IValue torch_name_value(const std::string& name) {
  static const std::pair<const char*, at::ScalarType> dtypes[] = {
    {"float32", at::kFloat},   {"float", at::kFloat},         {"float64", at::kDouble},
    {"double", at::kDouble},   {"float16", at::kHalf},        {"half", at::kHalf},
    {"bfloat16", at::kBFloat16}, {"int64", at::kLong},        {"long", at::kLong},
    {"int32", at::kInt},       {"int", at::kInt},             {"int16", at::kShort},
    {"int8", at::kChar},       {"uint8", at::kByte},          {"bool", at::kBool},
    {"complex64", at::kComplexFloat}, {"complex128", at::kComplexDouble}};
  for (auto& [n, t] : dtypes)
    if (name == n)
      return c10::IValue(t);
  if (name == "contiguous_format")
    return c10::IValue(at::MemoryFormat::Contiguous);
  if (name == "channels_last")
    return c10::IValue(at::MemoryFormat::ChannelsLast);
  if (name == "preserve_format")
    return c10::IValue(at::MemoryFormat::Preserve);
  if (name == "strided")
    return c10::IValue(at::kStrided);
  if (name == "sparse_coo")
    return c10::IValue(at::kSparse);
  if (name.rfind("sparse", 0) == 0)
    throw std::invalid_argument("unsupported: sparse layout torch." + name);
  throw std::invalid_argument("unknown value torch." + name);
}

// "cpu", "cuda", "cuda:0", "torch.device('cpu')": cuda means this runner's device.
at::Device device_value(std::string text, const at::Device& device) {
  auto open = text.find("device(");
  if (open != std::string::npos) {
    text = text.substr(open + 7);
    text = text.substr(0, text.find(')'));
  }
  std::string clean;
  for (char c : text)
    if (c != '\'' && c != '"' && c != ' ')
      clean += c;
  if (clean.rfind("cuda", 0) == 0)
    return device;
  return at::Device(clean);
}

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (auto opt = t->cast<c10::OptionalType>())
    return opt->getElementType();
  return t;
}

bool is_device_type(const c10::TypePtr& t) {
  return unwrap_optional(t)->kind() == c10::TypeKind::DeviceObjType;
}

c10::IValue convert(const value& v, const c10::TypePtr& type, at::Generator& gen,
                    const at::Device& device);

c10::IValue convert_list(const value& v, const c10::TypePtr& type, at::Generator& gen,
                         const at::Device& device) {
  auto target = type ? unwrap_optional(type) : nullptr;
  auto list_type = target ? target->cast<c10::ListType>() : nullptr;
  c10::TypePtr elem = list_type ? list_type->getElementType() : nullptr;
  auto elem_kind = elem ? unwrap_optional(elem)->kind() : c10::TypeKind::AnyType;
  bool elem_optional = elem && elem->kind() == c10::TypeKind::OptionalType;
  // Without a schema type, infer from the first non-None item; a None makes it optional.
  if (!elem) {
    for (auto& item : v.items)
      elem_optional = elem_optional || item.k == value::kind::none;
    for (auto& item : v.items) {
      if (item.k == value::kind::tensor)
        elem_kind = c10::TypeKind::TensorType;
      else if (item.k == value::kind::integer)
        elem_kind = c10::TypeKind::IntType;
      else if (item.k == value::kind::floating)
        elem_kind = c10::TypeKind::FloatType;
      else if (item.k == value::kind::boolean)
        elem_kind = c10::TypeKind::BoolType;
      else
        continue;
      break;
    }
  }
  switch (elem_kind) {
    case c10::TypeKind::TensorType: {
      if (elem_optional) {
        c10::List<std::optional<at::Tensor>> out;
        for (auto& item : v.items)
          out.push_back(item.k == value::kind::none
                          ? std::optional<at::Tensor>()
                          : std::optional<at::Tensor>(convert(item, nullptr, gen, device).toTensor()));
        return out;
      }
      c10::List<at::Tensor> out;
      for (auto& item : v.items)
        out.push_back(convert(item, nullptr, gen, device).toTensor());
      return out;
    }
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: {
      c10::List<int64_t> out;
      for (auto& item : v.items) {
        if (item.k != value::kind::integer)
          throw std::invalid_argument("a list of ints holds a non-integer");
        out.push_back(item.i);
      }
      return out;
    }
    case c10::TypeKind::FloatType: {
      c10::List<double> out;
      for (auto& item : v.items)
        out.push_back(item.k == value::kind::integer ? static_cast<double>(item.i) : item.f);
      return out;
    }
    case c10::TypeKind::BoolType: {
      c10::List<bool> out;
      for (auto& item : v.items)
        out.push_back(item.b);
      return out;
    }
    default: {
      std::vector<c10::IValue> items;
      for (auto& item : v.items)
        items.push_back(convert(item, elem, gen, device));
      if (elem_kind == c10::TypeKind::NumberType) {
        c10::List<c10::Scalar> out;
        for (auto& x : items)
          out.push_back(x.toScalar());
        return out;
      }
      return c10::ivalue::Tuple::create(std::move(items));
    }
  }
}

c10::IValue convert(const value& v, const c10::TypePtr& type, at::Generator& gen,
                    const at::Device& device) {
  auto target = type ? unwrap_optional(type) : nullptr;
  switch (v.k) {
    case value::kind::none: return c10::IValue();
    case value::kind::boolean: return c10::IValue(v.b);
    case value::kind::integer:
      if (target && target->kind() == c10::TypeKind::FloatType)
        return c10::IValue(static_cast<double>(v.i));
      return c10::IValue(v.i);
    case value::kind::floating: return c10::IValue(v.f);
    case value::kind::string:
      if (target && is_device_type(target))
        return c10::IValue(device_value(v.s, device));
      return c10::IValue(v.s);
    case value::kind::dtype: return c10::IValue(scalar_type_of(v.s));
    case value::kind::torch_name: return torch_name_value(v.s);
    case value::kind::tensor: return c10::IValue(make_tensor(v.t, gen, device));
    case value::kind::list: return convert_list(v, type, gen, device);
  }
  return c10::IValue();
}

} // namespace

uint64_t input_seed(const std::string& op_name, const std::string& call_text) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix(op_name);
  mix("\n");
  mix(call_text);
  return h;
}

at::Generator make_input_generator(uint64_t seed, const at::Device& device) {
#ifdef BB_WITH_CUDA
  if (device.is_cuda()) {
    auto gen = at::cuda::detail::createCUDAGenerator(device.has_index() ? device.index() : -1);
    gen.set_current_seed(seed);
    return gen;
  }
#endif
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

at::Tensor make_tensor(const args::tensor_spec& spec, at::Generator& gen, const at::Device& device) {
  auto dtype = scalar_type_of(spec.dtype);
  if (spec.has_strides && spec.strides.size() != spec.sizes.size())
    throw std::invalid_argument("tensor has " + std::to_string(spec.sizes.size()) + " sizes but "
                                + std::to_string(spec.strides.size()) + " strides");
  int64_t numel = 1;
  if (spec.has_strides) {
    bool empty = false;
    for (size_t i = 0; i < spec.sizes.size(); ++i) {
      empty = empty || spec.sizes[i] == 0;
      numel += (spec.sizes[i] - 1) * spec.strides[i];
    }
    if (empty)
      numel = 0;
  } else {
    for (auto s : spec.sizes)
      numel *= s;
  }
  // Built where it is used, from the generator of that device: no copy, no work on the CPU
  // for a CUDA job.
  auto options = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor flat;
  if (at::isComplexType(dtype)) {
    auto part = at::empty({numel, 2}, options.dtype(c10::toRealValueType(dtype)));
    part.uniform_(0.0, 1.0, gen);
    flat = at::view_as_complex(part);
  } else if (dtype == at::kBool) {
    flat = at::empty({numel}, options).random_(0, 2, gen);
  } else if (dtype == at::kByte) {
    flat = at::empty({numel}, options).random_(0, 10, gen);
  } else if (at::isIntegralType(dtype, false)) {
    flat = at::empty({numel}, options).random_(-9, 10, gen);
  } else {
    flat = at::empty({numel}, options).uniform_(0.0, 1.0, gen);
  }
  return spec.has_strides ? flat.as_strided(spec.sizes, spec.strides) : flat.view(spec.sizes);
}

namespace {

// aten's CPU max_pool{2,3}d_with_indices_backward scatters the gradient through `indices`
// without checking them: an index outside the input's plane (make_tensor's integers are
// -9..9) writes outside the gradient's buffer and corrupts the runner's memory, and a later
// job on the same runner then fails for no fault of its own. The CUDA kernels gather and
// ignore such an index, so there the inputs stay BackendBench's; on the CPU each index is
// taken modulo the plane's size, which keeps every write inside its own plane.
void keep_cpu_indices_in_plane(built_call& out, const c10::FunctionSchema& schema, const at::Device& device) {
  if (!device.is_cpu())
    return;
  int64_t plane_dims = schema.name() == "aten::max_pool2d_with_indices_backward"   ? 2
                       : schema.name() == "aten::max_pool3d_with_indices_backward" ? 3
                                                                                   : 0;
  if (plane_dims == 0)
    return;
  auto at_name = [&](const char* name) -> c10::IValue* {
    auto idx = schema.argumentIndexWithName(name);
    if (idx && static_cast<size_t>(*idx) < out.args.size())
      return &out.args[static_cast<size_t>(*idx)];
    auto kw = out.kwargs.find(name);
    return kw == out.kwargs.end() ? nullptr : &kw->second;
  };
  auto* self = at_name("self");
  auto* indices = at_name("indices");
  if (!self || !indices || !self->isTensor() || !indices->isTensor())
    return;
  auto input = self->toTensor();
  auto index = indices->toTensor();
  if (!index.defined() || !at::isIntegralType(index.scalar_type(), false) || input.dim() < plane_dims)
    return;
  int64_t plane = 1;
  for (int64_t d = input.dim() - plane_dims; d < input.dim(); ++d)
    plane *= input.size(d);
  if (plane > 0)
    *indices = c10::IValue(index.remainder(plane));
}

} // namespace

built_call build_call(const args::call& call, const c10::FunctionSchema& schema, uint64_t seed,
                      const at::Device& device) {
  auto gen = make_input_generator(seed, device);
  const auto& formals = schema.arguments();
  built_call out;
  for (size_t i = 0; i < call.args.size(); ++i) {
    c10::TypePtr type = i < formals.size() ? formals[i].type() : nullptr;
    out.args.push_back(convert(call.args[i], type, gen, device));
  }
  for (auto& [name, v] : call.kwargs) {
    c10::TypePtr type;
    if (auto idx = schema.argumentIndexWithName(name))
      type = formals[*idx].type();
    out.kwargs.emplace(name, convert(v, type, gen, device));
  }
  keep_cpu_indices_in_plane(out, schema, device);
  return out;
}

c10::IValue clone_value(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    return t.defined() ? c10::IValue(t.clone()) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList())
      out.push_back(t.defined() ? t.clone() : t);
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      out.push_back(t ? std::optional<at::Tensor>(t->clone()) : std::nullopt);
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (auto& x : v.toTupleRef().elements())
      items.push_back(clone_value(x));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isList())
    return c10::IValue(v.toList().copy());
  return v;
}

namespace {

bool same_kind(const at::Tensor& dst, const at::Tensor& src) {
  return dst.defined() && src.defined() && dst.sizes() == src.sizes() && dst.scalar_type() == src.scalar_type()
         && dst.device() == src.device() && dst.layout() == at::kStrided && src.layout() == at::kStrided
         && dst.is_non_overlapping_and_dense();
}

// Copies src's tensors into dst's in place; false (having copied part of them) where the
// two differ in structure or a tensor in shape, dtype, device or layout, or hold a
// non-tensor value that differs.
bool copy_tensors(const c10::IValue& dst, const c10::IValue& src) {
  if (dst.isTensor() && src.isTensor()) {
    const auto& d = dst.toTensor();
    const auto& s = src.toTensor();
    if (!d.defined() && !s.defined())
      return true;
    if (!same_kind(d, s))
      return false;
    d.copy_(s);
    return true;
  }
  auto d = elements_of(dst), e = elements_of(src);
  if (d && e) {
    if (d->size() != e->size())
      return false;
    for (size_t i = 0; i < d->size(); ++i)
      if (!copy_tensors((*d)[i], (*e)[i]))
        return false;
    return true;
  }
  if (dst.isTensor() || src.isTensor() || d || e)
    return false;
  // Numbers, strings, None, devices: equal or not.
  return dst == src;
}

} // namespace

c10::IValue empty_value_like(const c10::IValue& v) {
  auto room = [](const at::Tensor& t) {
    if (!t.defined() || t.layout() != at::kStrided)
      return t.defined() ? t.clone() : t;
    return at::empty_like(t);
  };
  if (v.isTensor())
    return room(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList())
      out.push_back(room(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      out.push_back(t ? std::optional<at::Tensor>(room(*t)) : std::nullopt);
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (auto& x : v.toTupleRef().elements())
      items.push_back(empty_value_like(x));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return clone_value(v);
}

built_call empty_call_like(const built_call& call) {
  built_call out;
  for (auto& a : call.args)
    out.args.push_back(empty_value_like(a));
  for (auto& [k, v] : call.kwargs)
    out.kwargs.emplace(k, empty_value_like(v));
  return out;
}

std::optional<c10::ArrayRef<c10::IValue>> elements_of(const c10::IValue& v) {
  if (v.isList())
    return v.toListRef();
  if (v.isTuple())
    return v.toTupleRef().elements();
  return std::nullopt;
}

void copy_value_into(c10::IValue& dst, const c10::IValue& src) {
  if (!copy_tensors(dst, src))
    dst = clone_value(src);
}

void copy_call_into(built_call& dst, const built_call& src) {
  if (dst.args.size() != src.args.size() || dst.kwargs.size() != src.kwargs.size()) {
    dst = clone_call(src);
    return;
  }
  for (size_t i = 0; i < src.args.size(); ++i)
    copy_value_into(dst.args[i], src.args[i]);
  for (auto& [k, v] : src.kwargs) {
    auto it = dst.kwargs.find(k);
    if (it == dst.kwargs.end()) {
      dst = clone_call(src);
      return;
    }
    copy_value_into(it->second, v);
  }
}

namespace {

// A number where the schema wants a Tensor becomes a wrapped 0-d CPU tensor, as Python's
// argument parser makes it for torch.ops.aten.div.Tensor(x, 8.0).
c10::IValue tensor_if_wanted(c10::IValue v, const c10::Argument* formal) {
  if (!formal || !(v.isDouble() || v.isInt() || v.isBool()))
    return v;
  auto type = unwrap_optional(formal->type());
  if (type->kind() != c10::TypeKind::TensorType)
    return v;
  auto t = at::scalar_to_tensor(v.toScalar());
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::IValue(t);
}

} // namespace

built_call clone_call(const built_call& call) {
  built_call out;
  for (auto& a : call.args)
    out.args.push_back(clone_value(a));
  for (auto& [k, v] : call.kwargs)
    out.kwargs.emplace(k, clone_value(v));
  return out;
}

std::vector<c10::IValue> stack_of(const built_call& call, const c10::FunctionSchema& schema) {
  const auto& formals = schema.arguments();
  std::vector<c10::IValue> stack;
  stack.reserve(formals.size());
  for (size_t i = 0; i < call.args.size(); ++i)
    stack.push_back(tensor_if_wanted(call.args[i], i < formals.size() ? &formals[i] : nullptr));
  std::unordered_map<std::string, c10::IValue> kwargs;
  for (auto& [k, v] : call.kwargs) {
    auto idx = schema.argumentIndexWithName(k);
    kwargs.emplace(k, tensor_if_wanted(v, idx ? &formals[*idx] : nullptr));
  }
  // Keyword arguments and defaults into their places, as Python's torch.ops does it: without
  // the schema's type check, which refuses what Python passes (a bool for a Scalar); the
  // operator's own unboxing judges the values.
  if (stack.size() > formals.size())
    throw std::invalid_argument(schema.name() + " takes " + std::to_string(formals.size())
                                + " arguments, not " + std::to_string(stack.size()));
  for (size_t i = stack.size(); i < formals.size(); ++i) {
    const auto& formal = formals[i];
    if (auto it = kwargs.find(formal.name()); it != kwargs.end()) {
      stack.push_back(std::move(it->second));
      kwargs.erase(it);
    } else if (formal.default_value()) {
      stack.push_back(*formal.default_value());
    } else {
      throw std::invalid_argument(schema.name() + " misses its argument '" + formal.name() + "'");
    }
  }
  if (!kwargs.empty())
    throw std::invalid_argument(schema.name() + " has no argument '" + kwargs.begin()->first + "'");
  return stack;
}

std::vector<c10::IValue> make_stack(const built_call& call, const c10::FunctionSchema& schema) {
  return stack_of(clone_call(call), schema);
}

} // namespace bb::runner
