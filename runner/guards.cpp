#include "runner/guards.hpp"

#include "process/proc.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <type_traits>
#include <sstream>

#include <ATen/Context.h>
#include <sched.h>
#include <sys/resource.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <ATen/SparseTensorImpl.h>

#ifdef BB_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace bb::runner {

// Every tensor of a value, a sparse one as its indices and values.
void each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& f) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined())
      return;
    if (t.is_sparse()) {
      f(t._indices());
      f(t._values());
    } else {
      f(t);
    }
  } else if (v.isTensorList()) {
    for (const auto& t : v.toTensorList())
      each_tensor(c10::IValue(static_cast<at::Tensor>(t)), f);
  } else if (v.isList()) {
    for (const auto& x : v.toListRef())
      each_tensor(x, f);
  } else if (v.isTuple()) {
    for (const auto& x : v.toTupleRef().elements())
      each_tensor(x, f);
  }
}

void each_tensor(const built_call& call, const std::function<void(const at::Tensor&)>& f) {
  for (const auto& a : call.args)
    each_tensor(a, f);
  for (const auto& [name, v] : call.kwargs)
    each_tensor(v, f);
}

namespace {

// A tensor over all of `t`'s storage, as elements of `dtype`; undefined when the storage is not
// a whole number of them or is not plain memory.
at::Tensor whole_storage(const at::Tensor& t, at::ScalarType dtype) {
  if (t.layout() != at::kStrided || !t.has_storage() || t.is_meta())
    return {};
  const auto& storage = t.storage();
  auto size = static_cast<int64_t>(c10::elementSize(dtype));
  auto nbytes = static_cast<int64_t>(storage.nbytes());
  if (nbytes == 0 || nbytes % size != 0 || !storage.data())
    return {};
  return at::empty({0}, t.options().dtype(dtype)).set_(storage, 0, {nbytes / size}, {1});
}

bool is_float(const at::Tensor& t) {
  return t.is_floating_point() || t.is_complex();
}

at::ScalarType real_type(const at::Tensor& t) {
  return t.is_complex() ? c10::toRealValueType(t.scalar_type()) : t.scalar_type();
}

uint64_t mix(uint64_t h, uint64_t x) {
  // splitmix64's finalizer over a running hash: distinct inputs give unrelated seeds.
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

// 32 random bits from a counter and a key: a multiply-xorshift hash in 32-bit arithmetic, so
// that a loop of them vectorizes.
inline uint32_t hash32(uint32_t i, uint32_t key) {
  uint32_t h = (i ^ key) * 0x9E3779B1u;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// out[j] = the top `bits` bits of hash32(first + j, key) over 2^bits: uniform in [0, 1). Built
// for AVX-512 and AVX2 as well, picked at run time (the baseline x86-64 has no vector 32-bit
// multiply).
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3"))) void
uniform_floats(float* __restrict out, int64_t n, uint32_t first, uint32_t key, int bits) {
  float scale = std::ldexp(1.0f, -bits);
  int shift = 32 - bits;
  for (int64_t j = 0; j < n; ++j)
    out[j] = static_cast<float>(static_cast<int32_t>(hash32(first + static_cast<uint32_t>(j), key) >> shift)) * scale;
}

// The same as half or bfloat16 bits. A value k / 2^11 (k < 2^11) is exact in half, and
// k / 2^8 in bfloat16, so the conversion is a shift of the float's bits: vectorized, where
// c10::Half's own conversion is not.
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3"))) void
uniform_halves(uint16_t* __restrict out, int64_t n, uint32_t first, uint32_t key, bool bfloat) {
  int bits = bfloat ? 8 : 11;
  float scale = std::ldexp(1.0f, -bits);
  for (int64_t j = 0; j < n; ++j) {
    float f = static_cast<float>(static_cast<int32_t>(hash32(first + static_cast<uint32_t>(j), key) >> (32 - bits))) * scale;
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    // half: the exponent rebased from 127 to 15, the significand's top 10 bits (0 stays 0).
    uint32_t half = u == 0 ? 0u : (u >> 13) - ((127u - 15u) << 10);
    out[j] = static_cast<uint16_t>(bfloat ? u >> 16 : half);
  }
}

// The same for doubles, with 53 random bits each (two hashes), so that ties are as rare as
// uniform_ makes them.
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3"))) void
uniform_doubles(double* __restrict out, int64_t n, uint32_t first, uint32_t key) {
  for (int64_t j = 0; j < n; ++j) {
    auto i = first + static_cast<uint32_t>(j);
    uint64_t bits = (static_cast<uint64_t>(hash32(i, key)) << 21) | (hash32(i, ~key) >> 11);
    out[j] = static_cast<double>(static_cast<int64_t>(bits)) * 0x1p-53;
  }
}

// Uniform values in [0, 1) from a counter: the i-th value of the stream `seed` depends on i
// alone, so that threads fill their ranges of a storage independently, with the dtype's
// significand of random bits (so that rounding never gives 1).
template <class T>
void fill_uniform(T* data, int64_t n, uint64_t seed) {
  at::parallel_for(0, n, int64_t{1} << 15, [&](int64_t begin, int64_t end) {
    constexpr int64_t chunk = 4096;
    float buf[chunk];
    for (int64_t at = begin; at < end;) {
      // A chunk within one block of 2^32 elements: each block takes a key of its own.
      int64_t stop = std::min({end, at + chunk, ((at >> 32) + 1) << 32});
      auto key = static_cast<uint32_t>(mix(seed, static_cast<uint64_t>(at >> 32)));
      auto first = static_cast<uint32_t>(at);
      if constexpr (std::is_same_v<T, float>) {
        uniform_floats(data + at, stop - at, first, key, 24);
      } else if constexpr (std::is_same_v<T, double>) {
        uniform_doubles(data + at, stop - at, first, key);
      } else if constexpr (std::is_same_v<T, at::Half> || std::is_same_v<T, at::BFloat16>) {
        uniform_halves(reinterpret_cast<uint16_t*>(data + at), stop - at, first, key,
                       std::is_same_v<T, at::BFloat16>);
      } else {
        uniform_floats(buf, stop - at, first, key, 24);
        for (int64_t j = 0; j < stop - at; ++j)
          data[at + j] = static_cast<T>(buf[j]);
      }
      at = stop;
    }
  });
}

// A CPU storage refilled as uniform_ would, many times faster than uniform_'s serial Mersenne
// twister (a refill before every timed call must not cost many calls' time): false for a dtype
// it does not know.
bool fill_uniform_cpu(const at::Tensor& whole, uint64_t seed) {
  if (!whole.device().is_cpu() || !whole.is_contiguous())
    return false;
  auto n = whole.numel();
  switch (whole.scalar_type()) {
  case at::kFloat:
    fill_uniform(whole.data_ptr<float>(), n, seed);
    return true;
  case at::kDouble:
    fill_uniform(whole.data_ptr<double>(), n, seed);
    return true;
  case at::kHalf:
    fill_uniform(whole.data_ptr<at::Half>(), n, seed);
    return true;
  case at::kBFloat16:
    fill_uniform(whole.data_ptr<at::BFloat16>(), n, seed);
    return true;
  default:
    return false;
  }
}

// A secret of this process mixed into every call's seed: the seeds of timed calls cannot be
// computed ahead by a kernel that knows how bbrunner makes them.
uint64_t process_secret() {
  static const uint64_t secret = [] {
    std::random_device entropy;
    return (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  }();
  return secret;
}

} // namespace

input_refresher::input_refresher(const built_call& call, const at::Device& device) : call_(&call), device_(device) {
  find_parts();
}

void input_refresher::find_parts() {
  parts_.clear();
  bool any_float = has_float_tensors(*call_);
  each_tensor(*call_, [&](const at::Tensor& t) {
    part p;
    p.source = t;
    if (t.has_storage()) {
      p.storage = t.storage().unsafeGetStorageImpl();
      p.nbytes = t.storage().nbytes();
    }
    if (is_float(t)) {
      // Kept without a storage to refill too: every floating-point tensor draws its stream.
      p.whole = whole_storage(t, real_type(t));
      parts_.push_back(std::move(p));
    } else if (!any_float && t.numel() > 1) {
      if (auto whole = whole_storage(t, t.scalar_type()); whole.defined() && whole.numel() > 1) {
        p.whole = whole;
        p.floating = false;
        auto options = at::TensorOptions().dtype(at::kLong).device(whole.device());
        p.order = at::empty({whole.numel()}, options);
        p.reordered = at::empty_like(whole);
        parts_.push_back(std::move(p));
      }
    }
  });
}

bool input_refresher::storages_moved() const {
  for (auto& p : parts_) {
    const auto& t = p.source;
    c10::StorageImpl* now = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
    if (now != p.storage || (now && t.storage().nbytes() != p.nbytes))
      return true;
  }
  return false;
}

void input_refresher::refresh(uint64_t seed) {
  // A tensor given another storage, or its storage resized (set_, resize_ by the code called
  // on it): found again, so that what is refilled is what the next call reads.
  if (call_ && storages_moved())
    find_parts();
  // One generator for the refresher's life, reseeded (its offset back to 0) for each call:
  // the values of a fresh generator of that seed, without making one between timed calls.
  uint64_t stream = seed;
  bool seeded = false;
  for (auto& part : parts_) {
    if (part.floating) {
      stream = mix(stream, 0x5eed);
      if (!part.whole.defined() || fill_uniform_cpu(part.whole, stream))
        continue;
      if (!generator_)
        generator_ = make_input_generator(seed, device_);
      else if (!seeded)
        generator_->set_current_seed(seed);
      seeded = true;
      part.whole.uniform_(0.0, 1.0, *generator_);
    } else {
      // A call of integer and bool tensors only: their values reordered, so that every index
      // or count the operator took stays one it takes, and a replay by pointer is wrong.
      // The order is an affine map i -> (a i + b) mod n with a coprime to n, drawn from the
      // seed on the host: randperm would do for n of 30000 and more, but below that CUDA's
      // runs on the host and copies from pageable memory, a synchronization before every timed
      // call that lays the kernel's launch overhead bare in its measured time. Into buffers
      // made once: nothing is allocated between timed calls.
      auto n = static_cast<uint64_t>(part.whole.numel());
      stream = mix(stream, 0x0dd);
      uint64_t a = 1 + mix(stream, 1) % std::min<uint64_t>(n - 1, uint64_t{1} << 31);
      while (std::gcd(a, n) != 1)
        a = a % (n - 1) + 1;
      uint64_t b = 1 + mix(stream, 2) % (n - 1); // never the identity
      at::arange_out(part.order, static_cast<int64_t>(n));
      part.order.mul_(static_cast<int64_t>(a)).add_(static_cast<int64_t>(b)).remainder_(static_cast<int64_t>(n));
      at::index_select_out(part.reordered, part.whole, 0, part.order);
      part.whole.copy_(part.reordered);
    }
  }
}

void refresh_floats(built_call& call, uint64_t seed, const at::Device& device) {
  input_refresher(call, device).refresh(seed);
}

uint64_t call_seed(uint64_t input_seed, uint64_t measurement, int64_t round, int64_t index,
                   bool timed, int checked_rank) {
  auto h = mix(mix(mix(input_seed, process_secret()), measurement + 1), timed ? 1 : 2);
  h = mix(h, static_cast<uint64_t>(round) + 1);
  return mix(h, checked_rank >= 0 ? std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(checked_rank)
                                  : static_cast<uint64_t>(index) + 1);
}

int64_t checked_slot(uint64_t n, size_t slots, uint64_t measurement) {
  if (n < slots)
    return static_cast<int64_t>(n);
  auto j = mix(mix(process_secret(), measurement + 0xc4ec), n) % (n + 1);
  return j < slots ? static_cast<int64_t>(j) : -1;
}

void poison_outputs(const c10::IValue& value, const built_call& keep) {
  std::vector<const void*> kept;
  each_tensor(keep, [&](const at::Tensor& t) {
    if (t.has_storage())
      kept.push_back(t.storage().data());
  });
  std::set<const void*> done;
  each_tensor(value, [&](const at::Tensor& t) {
    if (t.layout() != at::kStrided || !t.has_storage() || t.is_meta())
      return;
    const void* data = t.storage().data();
    if (!data || std::find(kept.begin(), kept.end(), data) != kept.end() || !done.insert(data).second)
      return;
    auto bytes = whole_storage(t, at::kByte);
    if (!bytes.defined())
      return;
    if (t.scalar_type() == at::kBool) {
      // true and false in turn: a mask never written is not all of either.
      bytes.fill_(0);
      bytes.slice(0, 0, bytes.numel(), 2).fill_(1);
    } else {
      bytes.fill_(0xFF);
    }
  });
}

void poison_answers_among(const c10::IValue& value, const built_call& among) {
  std::vector<const void*> buffers;
  each_tensor(among, [&](const at::Tensor& t) {
    if (t.has_storage())
      buffers.push_back(t.storage().data());
  });
  each_tensor(value, [&](const at::Tensor& t) {
    if (t.layout() != at::kStrided || !t.has_storage() || t.is_meta() || t.numel() == 0
        || !(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())))
      return;
    if (std::find(buffers.begin(), buffers.end(), t.storage().data()) != buffers.end())
      t.fill_(std::numeric_limits<double>::quiet_NaN());
  });
}

bool has_integer_tensors(const c10::IValue& value) {
  bool any = false;
  each_tensor(value, [&](const at::Tensor& t) {
    any = any || (at::isIntegralType(t.scalar_type(), false) && t.numel() > 0);
  });
  return any;
}

bool has_float_tensors(const built_call& call) {
  bool any = false;
  each_tensor(call, [&](const at::Tensor& t) { any = any || (is_float(t) && t.numel() > 0); });
  return any;
}

std::vector<variant> extra_inputs(const built_call& call, uint64_t seed, const at::Device& device) {
  std::vector<variant> out;
  for (const char* name : {"signed values", "special values"}) {
    variant v{name, clone_call(call)};
    auto gen = make_input_generator(mix(seed, out.size() + 0x5eed), device);
    bool special = out.size() == 1;
    each_tensor(v.call, [&](const at::Tensor& t) {
      if (!is_float(t))
        return;
      auto whole = whole_storage(t, real_type(t));
      if (!whole.defined())
        return;
      whole.uniform_(-3.0, 3.0, gen);
      if (!special)
        return;
      // Every 7th element zero, and one in 11, 13 and 17 +inf, -inf and NaN, from an offset of
      // the storage so that small tensors get each kind too.
      auto n = whole.numel();
      auto put = [&](int64_t start, int64_t step, double value) {
        if (start < n)
          whole.slice(0, start, n, step).fill_(value);
      };
      put(0, 7, 0.0);
      put(1, 11, std::numeric_limits<double>::infinity());
      put(2, 13, -std::numeric_limits<double>::infinity());
      put(3, 17, std::numeric_limits<double>::quiet_NaN());
    });
    out.push_back(std::move(v));
  }
  return out;
}

std::string not_plain(const c10::IValue& value, const c10::IValue& reference) {
  // The kinds of tensor the operator itself returns are plain for it (quantized, CSR, nested).
  std::set<std::string> own_kinds;
  each_tensor(reference, [&](const at::Tensor& t) { own_kinds.insert(typeid(*t.unsafeGetTensorImpl()).name()); });
  std::string why;
  each_tensor(value, [&](const at::Tensor& t) {
    if (!why.empty())
      return;
    auto* impl = t.unsafeGetTensorImpl();
    const char* kind = typeid(*impl).name();
    if (t.is_meta() && !own_kinds.count(kind))
      why = "a meta tensor (no data)";
    else if (t.key_set().has(c10::DispatchKey::Python))
      why = "a tensor with Python dispatch (a tensor subclass or mode)";
    else if (typeid(*impl) != typeid(c10::TensorImpl) && typeid(*impl) != typeid(at::SparseTensorImpl)
             && !own_kinds.count(kind))
      why = std::string("a wrapped tensor (") + kind + ")";
  });
  return why;
}

bool shares_storage(const c10::IValue& a, const c10::IValue& b) {
  std::vector<at::Tensor> xs;
  each_tensor(a, [&](const at::Tensor& t) {
    if (t.has_storage() && t.numel() > 0)
      xs.push_back(t);
  });
  bool shared = false;
  each_tensor(b, [&](const at::Tensor& t) {
    for (auto& x : xs)
      shared = shared || (t.has_storage() && t.numel() > 0 && t.storage().is_alias_of(x.storage()));
  });
  return shared;
}

// --- the dispatcher ---------------------------------------------------------------------------

namespace {

// The operators the evaluation itself calls: building and refreshing inputs, comparing,
// poisoning, copying.
const std::set<std::string>& relied_on() {
  static const std::set<std::string> names = {
    "aten::abs", "aten::add", "aten::all", "aten::any", "aten::as_strided", "aten::clone",
    "aten::coalesce", "aten::_coalesce", "aten::copy_", "aten::div", "aten::empty", "aten::eq",
    "aten::equal", "aten::fill_", "aten::isfinite", "aten::isnan", "aten::le", "aten::logical_and",
    "aten::logical_or", "aten::max", "aten::mul", "aten::ne", "aten::random_", "aten::remainder",
    "aten::reshape", "aten::set_", "aten::slice", "aten::stack", "aten::sub", "aten::sum",
    "aten::_to_copy", "aten::to", "aten::uniform_", "aten::view", "aten::view_as_complex",
    "aten::view_as_real", "aten::where", "aten::zero_", "aten::zeros", "aten::narrow",
    "aten::amax", "aten::maximum", "aten::gt", "aten::lt", "aten::ge", "aten::bitwise_and",
    "aten::bitwise_or", "aten::bitwise_not", "aten::bitwise_xor", "aten::logical_not",
    "aten::detach", "aten::empty_strided", "aten::empty_like", "aten::randperm",
    "aten::index_select", "aten::masked_select", "aten::nonzero", "aten::item",
    "aten::_local_scalar_dense", "aten::resize_", "aten::contiguous", "aten::expand",
    "aten::alias", "aten::_indices", "aten::_values", "aten::select", "aten::unbind",
    // In place, as the timed calls' refresher uses them (in-place overloads are their own
    // names: aten::mul_ is not aten::mul).
    "aten::arange", "aten::mul_", "aten::add_", "aten::remainder_"};
  return names;
}

// What the dispatcher keeps private, read through explicit template instantiation (where the
// language does not check access): the operator's entry behind a handle, and the function
// pointers and functor of a kernel. A registration's debug string ("registered at FILE:LINE")
// is the registrant's to choose; these are what a call runs.
template <class Tag, auto Member>
struct private_member {
  friend constexpr auto member_of(Tag) { return Member; }
};
// A tag whose member_of(tag{}) is a pointer to `member`.
#define BB_PRIVATE_MEMBER(tag, member)                                                              \
  struct tag {                                                                                      \
    friend constexpr auto member_of(tag);                                                           \
  };                                                                                                \
  template struct private_member<tag, member>
BB_PRIVATE_MEMBER(operator_def_of_handle, &c10::OperatorHandle::operatorDef_);
BB_PRIVATE_MEMBER(boxed_of_kernel, &c10::KernelFunction::boxed_kernel_func_);
BB_PRIVATE_MEMBER(unboxed_of_kernel, &c10::KernelFunction::unboxed_kernel_func_);
BB_PRIVATE_MEMBER(sym_unboxed_of_kernel, &c10::KernelFunction::sym_unboxed_kernel_func_);
BB_PRIVATE_MEMBER(functor_of_boxed, &c10::BoxedKernel::functor_);
BB_PRIVATE_MEMBER(function_of_boxed, &c10::BoxedKernel::boxed_kernel_func_);
#undef BB_PRIVATE_MEMBER

// The keys a call on a CPU or CUDA tensor goes through. Other keys' entries (Meta, Python,
// backends never used here) change as libraries register fake and meta kernels, which does not
// bend an evaluation.
constexpr c10::DispatchKey watched_keys[] = {
  c10::DispatchKey::CPU,          c10::DispatchKey::CUDA,           c10::DispatchKey::AutogradCPU,
  c10::DispatchKey::AutogradCUDA, c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::BackendSelect,
  c10::DispatchKey::AutocastCPU,  c10::DispatchKey::AutocastCUDA};

} // namespace

// Which kernel runs for each watched key of `op`, from its computed dispatch table: the
// kernel's function pointers and functor, which no registration can fake (a replacement
// registered under aten's own file and line is a different function), and a reference to the
// functor, so that its address is not reused while the fingerprint lives. Reading the table
// is a few array lookups: cheap enough to check every relied-on operator after every checked
// call.
struct dispatcher_fingerprint::table {
  struct entry {
    bool valid = false;
    const void* boxed = nullptr;
    const void* unboxed = nullptr;
    const void* sym_unboxed = nullptr;
    c10::intrusive_ptr<c10::OperatorKernel> functor;
    bool operator==(const entry& o) const {
      return valid == o.valid && boxed == o.boxed && unboxed == o.unboxed && sym_unboxed == o.sym_unboxed
             && functor.get() == o.functor.get();
    }
  };
  std::array<entry, std::size(watched_keys)> entries;
  bool operator==(const table& o) const { return entries == o.entries; }
};

namespace {

dispatcher_fingerprint::table table_of(const c10::OperatorHandle& op) {
  dispatcher_fingerprint::table t;
  const auto& entry = (op.*member_of(operator_def_of_handle{}))->op;
  for (size_t i = 0; i < std::size(watched_keys); ++i) {
    auto k = watched_keys[i];
    auto& e = t.entries[i];
    e.valid = op.hasComputedKernelForDispatchKey(k);
    if (!e.valid)
      continue;
    const c10::KernelFunction& f = entry.lookup(c10::DispatchKeySet(k));
    const c10::BoxedKernel& boxed = f.*member_of(boxed_of_kernel{});
    e.boxed = reinterpret_cast<const void*>(boxed.*member_of(function_of_boxed{}));
    e.functor = boxed.*member_of(functor_of_boxed{});
    e.unboxed = f.*member_of(unboxed_of_kernel{});
    e.sym_unboxed = f.*member_of(sym_unboxed_of_kernel{});
  }
  return t;
}

std::string full_name(const c10::OperatorName& n) {
  return n.name + (n.overload_name.empty() ? "" : "." + n.overload_name);
}

} // namespace

dispatcher_fingerprint::dispatcher_fingerprint() {
  auto& d = c10::Dispatcher::singleton();
  // Every overload but the named-dimension ones (nothing the evaluation calls reaches those;
  // out= overloads it does reach: aten's abs calls abs.out).
  static const std::vector<c10::OperatorName> names = [] {
    std::vector<c10::OperatorName> out;
    for (auto& n : c10::Dispatcher::singleton().getAllOpNames()) {
      const auto& o = n.overload_name;
      bool named = o.find("Dimname") != std::string::npos || o.find("names") != std::string::npos;
      if (relied_on().count(n.name) && !named)
        out.push_back(n);
    }
    return out;
  }();
  for (auto& n : names)
    if (auto h = d.findOp(n))
      tables_.emplace(full_name(n), seen{n, std::make_shared<const table>(table_of(*h))});
}

dispatcher_fingerprint dispatcher_fingerprint::with(const c10::OperatorHandle& op) const {
  auto out = *this;
  const auto& n = op.operator_name();
  out.tables_.insert_or_assign(full_name(n), seen{n, std::make_shared<const table>(table_of(op))});
  return out;
}

std::vector<std::string> dispatcher_fingerprint::changed() const {
  std::vector<std::string> out;
  auto& d = c10::Dispatcher::singleton();
  for (auto& [name, was] : tables_) {
    auto h = d.findOp(was.name);
    if (!h || !(table_of(*h) == *was.kernels))
      out.push_back(name);
  }
  return out;
}

// --- process state ----------------------------------------------------------------------------

namespace {

// Limits that make the reference fail where the kernel is not asked to run (an input whose
// reference fails is left out of the scores): the process's memory and the like.
const std::pair<const char*, int> watched_limits[] = {
  {"address space limit", RLIMIT_AS}, {"data limit", RLIMIT_DATA},    {"stack limit", RLIMIT_STACK},
  {"open files limit", RLIMIT_NOFILE}, {"CPU time limit", RLIMIT_CPU}, {"file size limit", RLIMIT_FSIZE}};

bool watched_limit(const std::string& name) {
  return std::any_of(std::begin(watched_limits), std::end(watched_limits),
                     [&](const auto& limit) { return name == limit.first; });
}

} // namespace

std::map<long, std::string> thread_affinities() {
  std::map<long, std::string> out;
  for (long tid : numbered_entries("/proc/self/task")) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(static_cast<pid_t>(tid), sizeof(set), &set) == 0)
      out[tid] = std::string(reinterpret_cast<const char*>(&set), sizeof(set));
  }
  return out;
}

namespace {

// "2 CPUs (0 1)": a mask as thread_affinities() keeps it, for a finding.
std::string cpus_text(const std::string& mask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::memcpy(&set, mask.data(), std::min(mask.size(), sizeof(set)));
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set))
      list += (list.empty() ? "" : " ") + std::to_string(cpu);
  auto n = CPU_COUNT(&set);
  return std::to_string(n) + (n == 1 ? " CPU (" : " CPUs (") + list + ")";
}

// Whether OpenMP was told to bind its workers to places: then each worker it starts is pinned
// by OpenMP itself, and a thread started since the baseline is not held to the baseline's CPUs.
bool openmp_binds() {
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"}) {
    const char* v = std::getenv(name);
    if (v && *v && std::string(v) != "false" && std::string(v) != "disabled")
      return true;
  }
  return false;
}

} // namespace

std::map<std::string, std::string> process_state::read() const {
  auto& ctx = at::globalContext();
  auto b = [](bool x) { return std::string(x ? "true" : "false"); };
  std::map<std::string, std::string> v;
  v["intra-op threads"] = std::to_string(at::get_num_threads());
  v["grad mode"] = b(c10::GradMode::is_enabled());
  v["deterministic algorithms"] = b(ctx.deterministicAlgorithms());
  v["cudnn benchmark"] = b(ctx.benchmarkCuDNN());
  v["cudnn deterministic"] = b(ctx.deterministicCuDNN());
  v["cudnn enabled"] = b(ctx.userEnabledCuDNN());
  v["float32 matmul precision"] = std::to_string(static_cast<int>(ctx.float32MatmulPrecision()));
  v["fp16 reduction in cuBLAS"] = std::to_string(static_cast<int>(ctx.allowFP16ReductionCuBLAS()));
  v["bf16 reduction in cuBLAS"] = std::to_string(static_cast<int>(ctx.allowBF16ReductionCuBLAS()));
  v["fp16 reduction on the CPU"] = b(ctx.allowFP16ReductionCPU());
  v["TF32 in cuBLAS"] = b(ctx.allowTF32CuBLAS());
  v["TF32 in cuDNN"] = b(ctx.allowTF32CuDNN());
  // What picks the reference's algorithms: a kernel that turned one off (oneDNN for a CPU
  // convolution, flash attention) or chose a slower library would slow the reference alone.
  v["mkldnn enabled"] = b(ctx.userEnabledMkldnn());
  v["mkldnn deterministic"] = b(ctx.deterministicMkldnn());
  v["NNPACK enabled"] = b(ctx.userEnabledNNPACK());
  v["cudnn benchmark limit"] = std::to_string(ctx.benchmarkLimitCuDNN());
  v["flash attention enabled"] = b(ctx.userEnabledFlashSDP());
  v["memory-efficient attention enabled"] = b(ctx.userEnabledMemEfficientSDP());
  v["math attention enabled"] = b(ctx.userEnabledMathSDP());
  v["cuDNN attention enabled"] = b(ctx.userEnabledCuDNNSDP());
  v["fp16/bf16 reduction in math attention"] = b(ctx.allowFP16BF16ReductionMathSDP());
  v["fp16 accumulation in cuBLAS"] = b(ctx.allowFP16AccumulationCuBLAS());
  v["linalg backend"] = std::to_string(static_cast<int>(ctx.linalgPreferredBackend()));
  v["BLAS backend"] = std::to_string(static_cast<int>(ctx.blasPreferredBackend()));
  v["deterministic fill of uninitialized memory"] = b(ctx.deterministicFillUninitializedMemory());
  // Callbacks around every operator call (RecordFunction) can see and change a comparison's
  // inputs or slow the reference alone, with no dispatcher table changed.
  v["operator callbacks (RecordFunction)"] = b(at::hasGlobalCallbacks() || at::hasThreadLocalCallbacks());
  for (auto [name, which] : watched_limits) {
    rlimit r{};
    if (::getrlimit(which, &r) == 0)
      v[name] = std::to_string(r.rlim_cur);
  }
#ifdef BB_WITH_CUDA
  if (device_ == "cuda") {
    v["current CUDA stream"] = std::to_string(c10::cuda::getCurrentCUDAStream().id());
    // A share of the device's memory the caching allocator may take (a kernel that set it low
    // starves the reference of memory).
    try {
      v["CUDA memory fraction"] = std::to_string(
        c10::cuda::CUDACachingAllocator::getMemoryFraction(c10::cuda::current_device()));
    } catch (const std::exception&) {
    }
  }
#endif
  return v;
}

process_state::process_state(std::string device)
  : keys_(c10::impl::tls_local_dispatch_key_set()), device_(std::move(device)) {
  values_ = read();
  threads_ = at::get_num_threads();
  grad_ = c10::GradMode::is_enabled();
  affinity_ = thread_affinities();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    cpus_ = std::string(reinterpret_cast<const char*>(&set), sizeof(set));
  hold_new_threads_ = !openmp_binds();
}

process_state::changes process_state::compare() const {
  changes out;
  auto now = read();
  for (auto& [name, before] : values_) {
    if (now[name] == before)
      continue;
    // A resource limit raised (a library taking the hard limit of open files) starves nothing.
    if (watched_limit(name) && !now[name].empty() && std::stoull(now[name]) > std::stoull(before))
      continue;
    out.global.push_back(name + ": " + before + " -> " + now[name]);
  }
  // A thread the kernel pinned to fewer CPUs (the reference's intra-op workers on one core)
  // slows the reference alone, as fewer intra-op threads would. A thread started since is held
  // to what the evaluating thread could run on then (unless OpenMP pins its own workers); one
  // that ended is no change.
  for (auto& [tid, mask] : thread_affinities()) {
    auto was = affinity_.find(tid);
    if (was == affinity_.end() && (!hold_new_threads_ || cpus_.empty()))
      continue;
    const auto& expected = was != affinity_.end() ? was->second : cpus_;
    if (mask != expected) {
      out.global.push_back("the CPUs thread " + std::to_string(tid) + " may run on: " + cpus_text(expected) + " -> "
                           + cpus_text(mask));
      break;
    }
  }
  if (auto n = c10::impl::TorchDispatchModeTLS::stack_len(); n > 0)
    out.dispatch.push_back(std::to_string(n) + " dispatch mode(s) left on");
  auto keys = c10::impl::tls_local_dispatch_key_set();
  if (!(keys.included_ == keys_.included_) || !(keys.excluded_ == keys_.excluded_))
    out.dispatch.push_back("the thread's dispatch keys changed");
  return out;
}

void process_state::restore() const {
  while (c10::impl::TorchDispatchModeTLS::stack_len() > 0)
    c10::impl::TorchDispatchModeTLS::pop_stack();
  c10::impl::_force_tls_local_dispatch_key_set(keys_);
  if (at::get_num_threads() != threads_)
    at::set_num_threads(static_cast<int>(threads_));
  c10::GradMode::set_enabled(grad_);
  auto& ctx = at::globalContext();
  auto was = [&](const char* name) { return values_.at(name) == "true"; };
  ctx.setDeterministicAlgorithms(was("deterministic algorithms"), ctx.deterministicAlgorithmsWarnOnly());
  ctx.setBenchmarkCuDNN(was("cudnn benchmark"));
  ctx.setDeterministicCuDNN(was("cudnn deterministic"));
  ctx.setUserEnabledCuDNN(was("cudnn enabled"));
  ctx.setAllowFP16ReductionCPU(was("fp16 reduction on the CPU"));
  ctx.setAllowTF32CuBLAS(was("TF32 in cuBLAS"));
  ctx.setAllowTF32CuDNN(was("TF32 in cuDNN"));
  ctx.setUserEnabledMkldnn(was("mkldnn enabled"));
  ctx.setUserEnabledNNPACK(was("NNPACK enabled"));
  ctx.setSDPUseFlash(was("flash attention enabled"));
  ctx.setSDPUseMemEfficient(was("memory-efficient attention enabled"));
  ctx.setSDPUseMath(was("math attention enabled"));
  ctx.setSDPUseCuDNN(was("cuDNN attention enabled"));
  // Set back only where changed, each on its own: a setter that refuses (a library this build
  // lacks) leaves the rest restored.
  auto now = read();
  auto back = [&](const char* name, const std::function<void(const std::string&)>& set) {
    auto was_value = values_.find(name);
    if (was_value == values_.end() || now[name] == was_value->second)
      return;
    try {
      set(was_value->second);
    } catch (const std::exception&) {
    }
  };
  back("mkldnn deterministic", [&](const std::string& v) { ctx.setDeterministicMkldnn(v == "true"); });
  back("cudnn benchmark limit", [&](const std::string& v) { ctx.setBenchmarkLimitCuDNN(std::stoi(v)); });
  back("fp16/bf16 reduction in math attention",
       [&](const std::string& v) { ctx.setAllowFP16BF16ReductionMathSDP(v == "true"); });
  back("fp16 accumulation in cuBLAS", [&](const std::string& v) { ctx.setAllowFP16AccumulationCuBLAS(v == "true"); });
  back("linalg backend",
       [&](const std::string& v) { ctx.setLinalgPreferredBackend(static_cast<at::LinalgBackend>(std::stoi(v))); });
  back("BLAS backend",
       [&](const std::string& v) { ctx.setBlasPreferredBackend(static_cast<at::BlasBackend>(std::stoi(v))); });
  back("deterministic fill of uninitialized memory",
       [&](const std::string& v) { ctx.setDeterministicFillUninitializedMemory(v == "true"); });
  for (auto& [tid, mask] : thread_affinities()) {
    auto was = affinity_.find(tid);
    if (was == affinity_.end() && (!hold_new_threads_ || cpus_.empty()))
      continue;
    const auto& expected = was != affinity_.end() ? was->second : cpus_;
    if (mask == expected)
      continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    std::memcpy(&set, expected.data(), std::min(expected.size(), sizeof(set)));
    (void)::sched_setaffinity(static_cast<pid_t>(tid), sizeof(set), &set);
  }
  // A limit a kernel lowered cannot be raised past the hard limit it may have lowered too:
  // set back what can be; the runner is replaced after the job anyway.
  for (auto [name, which] : watched_limits) {
    auto it = values_.find(name);
    rlimit r{};
    if (it == values_.end() || ::getrlimit(which, &r) != 0 || std::to_string(r.rlim_cur) == it->second)
      continue;
    r.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(std::stoull(it->second)), r.rlim_max);
    (void)::setrlimit(which, &r);
  }
#ifdef BB_WITH_CUDA
  if (device_ == "cuda") {
    c10::cuda::setCurrentCUDAStream(c10::cuda::getDefaultCUDAStream());
    back("CUDA memory fraction", [&](const std::string& v) {
      c10::cuda::CUDACachingAllocator::setMemoryFraction(std::stod(v), c10::cuda::current_device());
    });
  }
#endif
}

void poison_free_device_memory(const std::string& device, size_t prefix_bytes) {
#ifdef BB_WITH_CUDA
  if (device != "cuda")
    return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  auto snap = c10::cuda::CUDACachingAllocator::snapshot({0, 0}, false);
  for (const auto& seg : snap.segments) {
    size_t at = seg.address;
    for (const auto& block : seg.blocks) {
      if (!block.allocated && !block.active && block.size > 0) {
        size_t n = prefix_bytes == 0 ? block.size : std::min(block.size, prefix_bytes);
        (void)cudaMemsetAsync(reinterpret_cast<void*>(at), 0xFF, n, stream.stream());
      }
      at += block.size;
    }
  }
#else
  (void)device;
  (void)prefix_bytes;
#endif
}

std::string device_memory_held(const std::string& device, int64_t limit) {
#ifdef BB_WITH_CUDA
  // A runner whose jobs never allocated on the device has no allocator set up to ask (and
  // holds nothing there).
  if (device != "cuda" || c10::cuda::device_count() == 0 || !c10::cuda::CUDACachingAllocator::get()
      || !c10::cuda::CUDACachingAllocator::get()->initialized())
    return "";
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  auto held = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  if (held <= limit)
    return "";
  return std::to_string(held >> 20) + " MiB of device memory still allocated after the job (more than "
         + std::to_string(limit >> 20) + " MiB)";
#else
  (void)device;
  (void)limit;
  return "";
#endif
}

size_t poison_prefix_for(const c10::IValue& like) {
  size_t bytes = 0;
  each_tensor(like, [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage())
      bytes += t.storage().nbytes();
  });
  return std::max<size_t>(4 * bytes, size_t(8) << 20);
}

void poison_memory_for(const c10::IValue& like, const std::string& device) {
  if (device == "cuda") {
    poison_free_device_memory(device, poison_prefix_for(like));
    return;
  }
  std::vector<at::Tensor> blocks;
  each_tensor(like, [&](const at::Tensor& t) {
    if (t.layout() != at::kStrided || !t.has_storage() || t.is_meta() || !t.device().is_cpu())
      return;
    auto nbytes = static_cast<int64_t>(t.storage().nbytes());
    if (nbytes > 0)
      blocks.push_back(at::empty({nbytes}, at::TensorOptions().dtype(at::kByte)).fill_(0xFF));
  });
}

} // namespace bb::runner
