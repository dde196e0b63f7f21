#include "runner/compare.hpp"

#include <algorithm>
#include <cmath>
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

comparison compare_tensors(const at::Tensor& ref, const at::Tensor& res, double atol, double rtol) {
  if (ref.sizes() != res.sizes())
    return mismatch("The values for attribute 'shape' do not match: " + str(res.sizes())
                    + " != " + str(ref.sizes()) + ".");
  if (ref.scalar_type() != res.scalar_type())
    return mismatch("The values for attribute 'dtype' do not match: "
                    + str(res.scalar_type()) + " != " + str(ref.scalar_type()) + ".");
  if (ref.device() != res.device())
    return mismatch("The values for attribute 'device' do not match: " + str(res.device())
                    + " != " + str(ref.device()) + ".");
  comparison c;
  if (ref.numel() == 0)
    return c;
  bool complex = ref.is_complex();
  auto wide = complex ? at::kComplexDouble : at::kDouble;
  // In chunks: a double copy of a whole large half-precision output would need four times
  // its memory, several times over.
  constexpr int64_t chunk = int64_t{1} << 22;
  auto flat_ref = ref.detach().reshape({-1});
  auto flat_res = res.detach().reshape({-1});
  int64_t bad = 0;
  for (int64_t start = 0; start < flat_ref.numel(); start += chunk) {
    auto len = std::min(chunk, flat_ref.numel() - start);
    auto expected = flat_ref.narrow(0, start, len).to(at::kCPU, wide);
    auto actual = flat_res.narrow(0, start, len).to(at::kCPU, wide);
    auto both_nan = at::isnan(expected) & at::isnan(actual);
    auto diff = (expected - actual).abs();
    // Equal values (infinities included) and NaN pairs have zero error.
    auto same = (expected == actual) | both_nan;
    diff = at::where(same, at::zeros_like(diff), diff);
    auto allowed = atol + rtol * actual.abs();
    // As assert_close: non-finite values are close only when equal.
    auto close = same | (at::isfinite(expected) & at::isfinite(actual) & (diff <= allowed));
    merge_max(c.max_abs_error, diff.max().item<double>());
    merge_max(c.max_rel_error, (diff / (expected.abs() + 1e-10)).max().item<double>());
    bad += (~close).sum().item<int64_t>();
  }
  if (bad == 0)
    return c;
  c.ok = false;
  auto total = ref.numel();
  std::ostringstream os;
  os << "Tensor-likes are not close!\n\nMismatched elements: " << bad << " / " << total << " ("
     << std::round(1000.0 * static_cast<double>(bad) / static_cast<double>(total)) / 10.0
     << "%)\nGreatest absolute difference: " << c.max_abs_error << " (up to " << atol
     << " allowed)\nGreatest relative difference: " << c.max_rel_error << " (up to " << rtol
     << " allowed)";
  c.message = os.str();
  return c;
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

} // namespace

comparison compare(const c10::IValue& ref, const c10::IValue& res, double atol, double rtol) {
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
      total.max_abs_error = std::max(total.max_abs_error, c.max_abs_error);
      total.max_rel_error = std::max(total.max_rel_error, c.max_rel_error);
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
  if (ref.isNone() && res.isNone())
    return {};
  if (ref.tagKind() != res.tagKind() || !(ref == res))
    return mismatch("Values are not equal: expected " + str(ref) + ", got " + str(res) + ".");
  return {};
}

} // namespace bb::runner
