#include "suite/plan.hpp"

#include <cstdio>

#include "suite/traces.hpp"

namespace bb {

sweep_plan make_plan(const plan_request& req) {
  sweep_plan plan;
  suite loaded;
  if (req.suite_name == "smoke") {
    loaded = smoke_suite();
  } else if (req.suite_name == "torchbench") {
    if (req.data.empty()) {
      plan.fatal = traces::missing_data_help();
      return plan;
    }
    auto report = traces::load(req.data);
    if (!report.fatal.empty()) {
      plan.fatal = report.fatal;
      return plan;
    }
    loaded = std::move(report.loaded);
    plan.input_errors = std::move(report.errors);
    plan.skipped_ops = std::move(report.skipped);
    plan.lines = report.lines;
    plan.excluded_rows = report.excluded_rows;
  } else {
    plan.fatal = "unknown suite '" + req.suite_name + "' (smoke or torchbench)";
    return plan;
  }
  auto selection = select_ops(loaded, req.ops);
  plan.warnings = std::move(selection.warnings);
  plan.work = std::move(selection.selected);
  if (req.suite_name == "torchbench")
    req.smallest ? traces::keep_smallest(plan.work, req.topn) : traces::keep_largest(plan.work, req.topn);
  else if (req.topn > 0)
    for (auto& op : plan.work.ops) {
      if (op.correctness.size() > req.topn)
        op.correctness.resize(req.topn);
      if (op.performance.size() > req.topn)
        op.performance.resize(req.topn);
    }
  return plan;
}

std::string format_op_list(const suite& s, const std::vector<std::string>& schemas) {
  size_t width = 8;
  for (auto& op : s.ops)
    width = std::max(width, op.op_name.size());
  std::string out;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-*s  %6s  ", static_cast<int>(width), "operator", "inputs");
  out += std::string(buf) + "schema\n";
  for (size_t i = 0; i < s.ops.size(); ++i) {
    auto& op = s.ops[i];
    auto schema = i < schemas.size() ? schemas[i] : "";
    std::snprintf(buf, sizeof(buf), "%-*s  %6zu  ", static_cast<int>(width), "",
                  op.correctness.size());
    out += op.op_name + std::string(buf).substr(op.op_name.size())
           + (schema.empty() ? "unsupported op (not in this torch)" : schema) + "\n";
  }
  return out;
}

} // namespace bb
