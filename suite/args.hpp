#pragma once

// The argument grammar of operator traces (docs/architecture.md, "Inputs"): parses a call string such as
// "((T([2, 3], f16, [3, 1]), -1,), {'dtype': torch.float32})" into a value tree. No torch here:
// the coordinator reads traces, bbrunner turns the tree into IValues.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace bb::args {

/// A `T(...)` entry: sizes, dtype short name (f32, bf16, ...), optional strides.
struct tensor_spec {
  std::vector<int64_t> sizes;
  std::string dtype;
  bool has_strides = false;
  std::vector<int64_t> strides;
};

struct value {
  enum class kind { none, boolean, integer, floating, string, dtype, torch_name, tensor, list };
  kind k = kind::none;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  /// string text, dtype short name, or the NAME of `torch.NAME`.
  std::string s;
  tensor_spec t;
  std::vector<value> items;
};

struct call {
  std::vector<value> args;
  std::vector<std::pair<std::string, value>> kwargs;
};

/// Where and why a call string did not parse; column is 1-based.
struct parse_error {
  size_t column = 0;
  std::string expected;
  std::string found;
};

/// Renders "column C: expected X, found Y".
std::string to_string(const parse_error& e);

using parse_result = std::variant<call, parse_error>;

/// Parses one call string "(args, kwargs)".
parse_result parse_call(std::string_view text);

/// True for the dtype short names of the grammar.
bool is_dtype(std::string_view name);

/// Bytes of one element of a dtype short name.
int64_t dtype_size(std::string_view name);

/// A double as Python's repr writes it: shortest round-trip digits, fixed notation with ".0"
/// for exponents -4..15, else "1e-05" / "1.5e+16"; "inf", "-inf", "nan".
std::string python_repr(double x);

/// The call written back as BackendBench's serialize_args writes it: the args tuple always
/// ends in ",)", strides only for non-contiguous tensors (as a list), dtypes as torch.X,
/// devices as device(type='X'), strings and numbers as Python's repr.
std::string serialize(const call& c);

/// serialize() of a call string; the text unchanged when it does not parse.
std::string serialize_text(const std::string& text);

/// True when a tensor with these sizes and strides is contiguous by PyTorch's rule (sizes of
/// one are ignored; an empty tensor is contiguous).
bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

/// Total bytes of every tensor in a call, nested lists included (BackendBench's _args_size).
int64_t total_tensor_bytes(const call& c);

} // namespace bb::args
