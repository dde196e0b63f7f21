#include "suite/ops.hpp"

#include <algorithm>
#include <numeric>

namespace bb::ops {

namespace {

std::string_view strip_aten(std::string_view s) {
  return s.substr(0, 5) == "aten." ? s.substr(5) : s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

} // namespace

schema_name to_schema_name(std::string_view op_name) {
  auto rest = strip_aten(op_name);
  auto dot = rest.find('.');
  schema_name out;
  out.name = "aten::" + std::string(rest.substr(0, dot));
  if (dot != std::string_view::npos) {
    auto overload = rest.substr(dot + 1);
    if (overload != "default")
      out.overload = std::string(overload);
  }
  return out;
}

std::string base_name(std::string_view op_name) {
  auto rest = strip_aten(op_name);
  return std::string(rest.substr(0, rest.find('.')));
}

bool matches(std::string_view token, std::string_view op_name) {
  return token == op_name || token == strip_aten(op_name) || token == base_name(op_name);
}

std::string op_name_to_folder_name(std::string_view op_name) {
  auto rest = strip_aten(op_name);
  std::string out;
  for (char c : rest)
    out += c == '.' ? std::string("__") : std::string(1, c);
  return out;
}

std::string folder_name_to_op_name(std::string_view folder) {
  std::string rest(folder);
  std::string out;
  // Right to left: in "add___Tensor" the separator is the last two underscores.
  for (auto pos = rest.rfind("__"); pos != std::string::npos && pos > 0; pos = rest.rfind("__")) {
    out = "." + rest.substr(pos + 2) + out;
    rest = rest.substr(0, pos);
  }
  return rest + out;
}

std::string folder_name_to_aten_name(std::string_view folder) {
  auto name = folder_name_to_op_name(folder);
  if (name.find('.') == std::string::npos)
    name += ".default";
  return "aten." + name;
}

std::vector<std::string> split_tokens(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    auto piece = list.substr(start, comma == std::string_view::npos ? comma : comma - start);
    auto b = piece.find_first_not_of(" \t");
    auto e = piece.find_last_not_of(" \t");
    if (b != std::string_view::npos)
      out.emplace_back(piece.substr(b, e - b + 1));
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> closest(std::string_view token, const std::vector<std::string>& candidates,
                                 size_t n) {
  // Compare like with like: a base name with base names, "relu.default" with names without
  // "aten.", a full name with full names.
  auto comparable = [&](const std::string& c) -> std::string {
    if (token.find('.') == std::string_view::npos)
      return base_name(c);
    if (token.substr(0, 5) != "aten.")
      return std::string(strip_aten(c));
    return c;
  };
  std::vector<std::pair<size_t, std::string>> scored;
  for (auto& c : candidates) {
    auto d = edit_distance(token, comparable(c));
    if (std::none_of(scored.begin(), scored.end(), [&](auto& s) { return s.second == c; }))
      scored.emplace_back(d, c);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < n; ++i)
    out.push_back(scored[i].second);
  return out;
}

} // namespace bb::ops
