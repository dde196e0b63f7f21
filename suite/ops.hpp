#pragma once

// Operator names: "aten.relu.default" <-> dispatcher name "aten::relu" + overload "", and
// the --ops matching rules of docs/architecture.md, "Command line".

#include <string>
#include <string_view>
#include <vector>

namespace bb::ops {

/// "aten.add.Tensor" -> {"aten::add", "Tensor"}; "aten.relu.default" -> {"aten::relu", ""}.
struct schema_name {
  std::string name;
  std::string overload;
};

schema_name to_schema_name(std::string_view op_name);

/// "aten.relu.default" -> "relu".
std::string base_name(std::string_view op_name);

/// True when `token` selects `op_name`: the full name, the name without "aten.", or the base
/// name (every overload). Never a substring.
bool matches(std::string_view token, std::string_view op_name);

/// BackendBench's folder name of an operator: every "." becomes "__", the "aten." prefix
/// dropped: "add.Tensor" -> "add__Tensor", "add_.Tensor" -> "add___Tensor".
std::string op_name_to_folder_name(std::string_view op_name);

/// The inverse, decoding "__" right to left: "add___Tensor" -> "add_.Tensor",
/// "nn__functional__relu" -> "nn.functional.relu", "_native_batch_norm" unchanged.
std::string folder_name_to_op_name(std::string_view folder);

/// The full aten name of a kernel folder: "add__Tensor" -> "aten.add.Tensor"; a bare name
/// is the default overload: "relu" -> "aten.relu.default".
std::string folder_name_to_aten_name(std::string_view folder);

/// Splits "a,b, c" into trimmed non-empty tokens.
std::vector<std::string> split_tokens(std::string_view list);

/// The names among `candidates` closest to `token` (edit distance), at most `n`.
std::vector<std::string> closest(std::string_view token, const std::vector<std::string>& candidates,
                                 size_t n = 3);

} // namespace bb::ops
