#include "suite/suite.hpp"

#include "suite/ops.hpp"

namespace bb {

suite smoke_suite() {
  suite s;
  s.name = "smoke";
  s.ops.push_back({"aten.relu.default", {"((T([2], f32),), {})"}, {"((T([1024, 1024], f32),), {})"}});
  return s;
}

op_selection select_ops(const suite& s, const std::vector<std::string>& tokens) {
  op_selection out;
  out.selected.name = s.name;
  if (tokens.empty()) {
    out.selected = s;
    return out;
  }
  std::vector<std::string> names;
  for (auto& op : s.ops)
    names.push_back(op.op_name);
  std::vector<bool> used(tokens.size(), false);
  for (auto& op : s.ops) {
    bool keep = false;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (ops::matches(tokens[i], op.op_name))
        keep = used[i] = true;
    if (keep)
      out.selected.ops.push_back(op);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (used[i])
      continue;
    std::string line = "--ops token '" + tokens[i] + "' matches no operator of suite " + s.name;
    auto near = ops::closest(tokens[i], names);
    if (!near.empty()) {
      line += "; closest:";
      for (auto& n : near)
        line += " " + n;
    }
    out.warnings.push_back(line);
  }
  return out;
}

} // namespace bb
