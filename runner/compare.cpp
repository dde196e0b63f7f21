#include "runner/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include <ATen/ATen.h>

namespace bb::runner {

namespace {

comparison mismatch(std::string why) {
  comparison c;
  c.ok = false;
  c.message = std::move(why);
  return c;
}

template <class T>
std::string str(const T& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// A running maximum in which NaN wins, as a tensor's max() would report it.
void merge_max(double& current, double x) {
  if (!std::isnan(current) && (std::isnan(x) || x > current))
    current = x;
}

std::string not_close_message(int64_t bad, int64_t total, const comparison& c, double atol, double rtol) {
  std::ostringstream os;
  os << "Tensor-likes are not close!\n\nMismatched elements: " << bad << " / " << total << " ("
     << std::round(1000.0 * static_cast<double>(bad) / static_cast<double>(total)) / 10.0
     << "%)\nGreatest absolute difference: " << c.max_abs_error << " (up to " << atol
     << " allowed)\nGreatest relative difference: " << c.max_rel_error << " (up to " << rtol
     << " allowed)";
  return os.str();
}

} // namespace

bool known_equal(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()
      || a.layout() != at::kStrided || b.layout() != at::kStrided || a.device() != b.device())
    return false;
  // Bits that change what the bytes mean (a conjugate or negative view), a tensor of no
  // memory (ZeroTensor), a quantized one: not judged here.
  if (a.is_conj() || b.is_conj() || a.is_neg() || b.is_neg() || a._is_zerotensor() || b._is_zerotensor()
      || a.is_quantized() || b.is_quantized() || !a.has_storage() || !b.has_storage())
    return false;
  // Dense with the same strides (contiguous, or permuted alike): the elements fill
  // numel slots from the data pointer on, in the same order in both.
  if (a.device().is_cpu() && a.strides() == b.strides() && a.is_non_overlapping_and_dense()) {
    auto bytes = static_cast<size_t>(a.numel()) * a.element_size();
    return bytes == 0 || std::memcmp(a.const_data_ptr(), b.const_data_ptr(), bytes) == 0;
  }
  return at::equal(a, b);
}

namespace {

// Elements compared per step. Each step makes a few temporaries of this many doubles on the
// tensors' own device (about 128 MiB each), so the extra memory is bounded whatever the size.
constexpr int64_t chunk = int64_t{1} << 24;

// Closeness of two dense tensors of the same shape, dtype and device, as assert_close decides
// it: both promoted to the widest type of their kind (float64, complex128, int64), then
// |ref - res| <= atol + rtol * |res| elementwise, NaN equal to NaN, non-finite values close
// only when equal. Computed where the tensors are; one small copy to the host per step.
comparison compare_values(const at::Tensor& ref, const at::Tensor& res, double atol, double rtol) {
  comparison c;
  auto total = ref.numel();
  if (total == 0)
    return c;
  // Equal bit for bit (aten against itself, a timed call's check): one pass and one wait on
  // the device instead of a widened copy of every chunk. NaN is never equal here and takes
  // the full comparison.
  if (known_equal(ref, res))
    return c;
  auto wide = ref.is_complex() ? at::kComplexDouble : at::kDouble;
  bool floating = ref.is_floating_point() || ref.is_complex();
  auto flat_ref = ref.detach().reshape({-1});
  auto flat_res = res.detach().reshape({-1});
  int64_t bad = 0;
  for (int64_t start = 0; start < total; start += chunk) {
    auto len = std::min(chunk, total - start);
    auto expected = flat_ref.narrow(0, start, len).to(wide);
    auto actual = flat_res.narrow(0, start, len).to(wide);
    auto same = expected == actual;
    if (floating)
      same = same | (at::isnan(expected) & at::isnan(actual));
    auto diff = at::where(same, at::zeros({}, expected.options().dtype(at::kDouble)), (expected - actual).abs());
    auto allowed = atol + rtol * actual.abs();
    auto close = same | (at::isfinite(expected) & at::isfinite(actual) & (diff <= allowed));
    auto stats = at::stack({diff.max(), (diff / (expected.abs() + 1e-10)).max(),
                            (~close).sum().to(at::kDouble)})
                   .to(at::kCPU);
    auto s = stats.accessor<double, 1>();
    merge_max(c.max_abs_error, s[0]);
    merge_max(c.max_rel_error, s[1]);
    bad += static_cast<int64_t>(s[2]);
  }
  if (bad > 0) {
    c.ok = false;
    c.message = not_close_message(bad, total, c, atol, rtol);
  }
  return c;
}

// Sparse COO tensors as assert_close compares them: coalesced, the same number of specified
// elements at the same indices, their values close.
comparison compare_sparse(const at::Tensor& ref, const at::Tensor& res, double atol, double rtol) {
  // The same indices and values in the same order: equal, without coalescing either.
  if (ref._nnz() == res._nnz() && known_equal(ref._indices(), res._indices())
      && known_equal(ref._values(), res._values()))
    return {};
  auto a = ref.is_coalesced() ? ref : ref.coalesce();
  auto b = res.is_coalesced() ? res : res.coalesce();
  if (a._nnz() != b._nnz())
    return mismatch("The number of specified values in sparse COO tensors does not match: "
                    + std::to_string(b._nnz()) + " != " + std::to_string(a._nnz()));
  if (!at::equal(a._indices(), b._indices()))
    return mismatch("Sparse COO indices do not match.");
  return compare_values(a._values(), b._values(), atol, rtol);
}

comparison compare_tensors(const at::Tensor& ref, const at::Tensor& res, double atol, double rtol) {
  // An undefined tensor is what aten returns for an output it was told not to compute (a
  // masked backward output); Python sees it as None.
  if (!ref.defined() || !res.defined()) {
    if (ref.defined() == res.defined())
      return {};
    return mismatch(std::string("Expected ") + (ref.defined() ? "a tensor" : "None") + ", got "
                    + (res.defined() ? "a tensor" : "None") + ".");
  }
  if (ref.layout() != res.layout())
    return mismatch("The values for attribute 'layout' do not match: " + str(res.layout()) + " != "
                    + str(ref.layout()) + ".");
  if (ref.sizes() != res.sizes())
    return mismatch("The values for attribute 'shape' do not match: " + str(res.sizes())
                    + " != " + str(ref.sizes()) + ".");
  if (ref.scalar_type() != res.scalar_type())
    return mismatch("The values for attribute 'dtype' do not match: "
                    + str(res.scalar_type()) + " != " + str(ref.scalar_type()) + ".");
  if (ref.device() != res.device())
    return mismatch("The values for attribute 'device' do not match: " + str(res.device())
                    + " != " + str(ref.device()) + ".");
  if (ref.is_sparse())
    return compare_sparse(ref, res, atol, rtol);
  if (ref.layout() != at::kStrided)
    return mismatch("cannot compare tensors of layout " + str(ref.layout()));
  return compare_values(ref, res, atol, rtol);
}

comparison compare_numbers(double ref, double res, double atol, double rtol) {
  comparison c;
  if ((std::isnan(ref) && std::isnan(res)) || ref == res)
    return c;
  c.max_abs_error = std::fabs(ref - res);
  c.max_rel_error = c.max_abs_error / (std::fabs(ref) + 1e-10);
  if (c.max_abs_error <= atol + rtol * std::fabs(res))
    return c;
  c.ok = false;
  c.message = "Scalars are not close!\n\nExpected " + str(ref) + " but got " + str(res) + ".";
  return c;
}

std::vector<c10::IValue> elements(const c10::IValue& v) {
  if (v.isTuple())
    return v.toTupleRef().elements().vec();
  return v.toList().vec();
}

bool is_none_like(const c10::IValue& v) {
  return v.isNone() || (v.isTensor() && !v.toTensor().defined());
}

} // namespace

comparison compare(const c10::IValue& ref, const c10::IValue& res, double atol, double rtol) {
  // None and an undefined tensor are the same value to Python.
  if (is_none_like(ref) && is_none_like(res))
    return {};
  if (ref.isTensor() || res.isTensor()) {
    if (!ref.isTensor() || !res.isTensor())
      return mismatch("Expected a tensor and a tensor, got " + ref.tagKind() + " and "
                      + res.tagKind() + ".");
    return compare_tensors(ref.toTensor(), res.toTensor(), atol, rtol);
  }
  bool ref_seq = ref.isTuple() || ref.isList();
  bool res_seq = res.isTuple() || res.isList();
  if (ref_seq || res_seq) {
    if (!ref_seq || !res_seq)
      return mismatch("Expected a sequence and a sequence, got " + ref.tagKind() + " and "
                      + res.tagKind() + ".");
    auto a = elements(ref);
    auto b = elements(res);
    if (a.size() != b.size())
      return mismatch("The length of the sequences mismatch: " + std::to_string(b.size())
                      + " != " + std::to_string(a.size()));
    comparison total;
    for (size_t i = 0; i < a.size(); ++i) {
      auto c = compare(a[i], b[i], atol, rtol);
      merge_max(total.max_abs_error, c.max_abs_error);
      merge_max(total.max_rel_error, c.max_rel_error);
      if (!c.ok && total.ok) {
        total.ok = false;
        total.message = "The failure occurred for item [" + std::to_string(i) + "]:\n\n" + c.message;
      }
    }
    return total;
  }
  bool ref_num = ref.isDouble() || ref.isInt() || ref.isBool();
  bool res_num = res.isDouble() || res.isInt() || res.isBool();
  if (ref_num && res_num) {
    if (ref.isBool() != res.isBool())
      return mismatch("Expected values of the same type, got " + ref.tagKind() + " and "
                      + res.tagKind() + ".");
    auto as_double = [](const c10::IValue& v) {
      return v.isDouble() ? v.toDouble() : v.isInt() ? static_cast<double>(v.toInt())
                                                     : (v.toBool() ? 1.0 : 0.0);
    };
    return compare_numbers(as_double(ref), as_double(res), atol, rtol);
  }
  if (ref.tagKind() != res.tagKind() || !(ref == res))
    return mismatch("Values are not equal: expected " + str(ref) + ", got " + str(res) + ".");
  return {};
}

} // namespace bb::runner
