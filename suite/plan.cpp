#include "suite/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include <fstream>

#include <nlohmann/json.hpp>

#include "suite/traces.hpp"

namespace bb {

namespace {

// The samples bbcluster_opinfo.py selected: {"ops": [{"op", "inputs"}], "unusable": [...]}.
bool load_opinfo_plan(const std::string& path, suite& loaded, sweep_plan& plan) {
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    loaded.name = plan.work.name = "opinfo";
    for (auto& op : j.at("ops")) {
      op_inputs x{op.at("op").get<std::string>(), op.at("inputs").get<std::vector<std::string>>(), {}};
      plan.lines += x.correctness.size();
      loaded.ops.push_back(std::move(x));
    }
    for (auto& why : j.value("unusable", nlohmann::json::array()))
      plan.skipped_ops.push_back(why.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    plan.fatal = "the opinfo suite's samples (" + path + "): " + e.what();
    return false;
  }
  if (loaded.ops.empty()) {
    // Why not, OpInfo by OpInfo (a few).
    constexpr size_t shown = 5;
    std::string why;
    for (size_t i = 0; i < plan.skipped_ops.size() && i < shown; ++i)
      why += "\n  " + plan.skipped_ops[i];
    if (plan.skipped_ops.size() > shown)
      why += "\n  ... and " + std::to_string(plan.skipped_ops.size() - shown) + " more";
    plan.fatal = "the opinfo suite has no operator with a usable sample here (torch "
                 + j.value("torch", std::string("?")) + ", " + j.value("device", std::string("?"))
                 + ", " + j.value("dtype", std::string("?")) + ")" + (why.empty() ? "" : ":" + why);
    return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& words, const char* between) {
  std::string out;
  for (auto& w : words)
    out += (out.empty() ? "" : between) + w;
  return out;
}

// Why a torchbench plan whose data (`files` files) gave no operator at all has none.
std::string empty_data_reason(const std::string& data, size_t files, const sweep_plan& plan) {
  std::vector<std::string> parts;
  if (plan.excluded_rows > 0)
    parts.push_back(std::to_string(plan.excluded_rows) + " rows not included_in_benchmark");
  if (plan.not_overhead_rows > 0)
    parts.push_back(std::to_string(plan.not_overhead_rows)
                    + " rows not marked is_overhead_dominated_op");
  if (!plan.skipped_ops.empty())
    parts.push_back(std::to_string(plan.skipped_ops.size())
                    + " operators BackendBench's torchbench suite skips");
  auto bad = std::to_string(plan.input_errors.size());
  if (!plan.input_errors.empty())
    parts.push_back(parts.empty() ? "none of its lines parse (" + bad + " lines)"
                                  : bad + " lines that do not parse");
  if (parts.empty())
    parts.push_back(files == 1 ? "it holds no input ('cnt:' line or .jsonl row)"
                               : "its " + std::to_string(files)
                                   + " trace files hold no input ('cnt:' line or .jsonl row)");
  return "--data " + data + " selects no operator: " + join(parts, "; ");
}

} // namespace

sweep_plan make_plan(const plan_request& req) {
  sweep_plan plan;
  suite loaded;
  size_t files = 0;
  if (req.suite_name == "smoke") {
    loaded = smoke_suite();
  } else if (req.suite_name == "torchbench") {
    if (req.data.empty()) {
      plan.fatal = traces::missing_data_help();
      return plan;
    }
    auto report = traces::load(req.data, traces::row_filter{req.overhead_dominated_only});
    if (!report.fatal.empty()) {
      plan.fatal = report.fatal;
      return plan;
    }
    files = report.files;
    loaded = std::move(report.loaded);
    plan.input_errors = std::move(report.errors);
    plan.skipped_ops = std::move(report.skipped);
    plan.lines = report.lines;
    plan.excluded_rows = report.excluded_rows;
    plan.excluded_reasons = std::move(report.excluded_reasons);
    plan.excluded_by_op = std::move(report.excluded_by_op);
    plan.not_overhead_rows = report.not_overhead_rows;
    if (req.overhead_dominated_only && plan.lines == 0 && plan.excluded_rows == 0) {
      plan.fatal = "--check-overhead-dominated-ops selects the rows marked "
                   "is_overhead_dominated_op; " + req.data + " marks none (" +
                   std::to_string(plan.not_overhead_rows) + " rows; trace files carry no such "
                   "mark: give BackendBench's .parquet or a .jsonl of it)";
      return plan;
    }
  } else if (req.suite_name == "opinfo") {
    if (!load_opinfo_plan(req.data, loaded, plan))
      return plan;
  } else {
    plan.fatal = "unknown suite '" + req.suite_name + "' (smoke, torchbench or opinfo)";
    return plan;
  }
  if (!plan.excluded_by_op.empty()) {
    suite left_out;
    std::set<std::string> present;
    for (auto& op : loaded.ops)
      present.insert(op.op_name);
    for (auto& line : plan.skipped_ops)
      present.insert(line.substr(0, line.find(':')));
    for (auto& [op, n] : plan.excluded_by_op)
      if (!present.count(op))
        left_out.ops.push_back(op_inputs{op, {}, {}});
    for (auto& op : select_ops(left_out, req.ops).selected.ops)
      plan.wholly_excluded.emplace_back(op.op_name, plan.excluded_by_op[op.op_name]);
  }
  // The opinfo suite is selected by OpInfo name where it is built.
  auto selection = select_ops(loaded, req.suite_name == "opinfo" ? std::vector<std::string>{} : req.ops);
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
  // A sweep of nothing would end in exit 0 with empty reports: say why instead.
  if (plan.work.ops.empty()) {
    if (loaded.ops.empty())
      plan.fatal = empty_data_reason(req.data, files, plan);
    else if (!plan.wholly_excluded.empty())
      plan.fatal = "--ops " + join(req.ops, ",") + " selects only operators none of whose rows "
                   "are included_in_benchmark (" + std::to_string(plan.wholly_excluded.size())
                   + " operators)";
    else
      plan.fatal = "--ops " + join(req.ops, ",") + " selects none of the "
                   + std::to_string(loaded.ops.size()) + " operators of suite " + loaded.name
                   + " (--list shows them)";
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

std::string format_exclusions(const sweep_plan& plan) {
  if (plan.excluded_rows == 0 && plan.not_overhead_rows == 0 && plan.skipped_ops.empty())
    return "";
  std::string out = "\n";
  if (!plan.skipped_ops.empty()) {
    out += std::to_string(plan.skipped_ops.size()) + " operators left out as BackendBench's " + plan.work.name
           + " suite leaves them out:\n";
    for (auto& why : plan.skipped_ops)
      out += "  " + why + "\n";
  }
  if (plan.not_overhead_rows > 0)
    out += std::to_string(plan.not_overhead_rows)
           + " rows left out: not is_overhead_dominated_op (--check-overhead-dominated-ops)\n";
  if (plan.excluded_rows > 0) {
    out += std::to_string(plan.excluded_rows) + " rows left out: not included_in_benchmark, because\n";
    std::vector<std::pair<size_t, std::string>> reasons;
    for (auto& [why, n] : plan.excluded_reasons)
      reasons.emplace_back(n, why);
    std::sort(reasons.rbegin(), reasons.rend());
    char buf[32];
    for (auto& [n, why] : reasons) {
      std::snprintf(buf, sizeof(buf), "  %6zu  ", n);
      out += buf + why + "\n";
    }
  }
  if (!plan.wholly_excluded.empty()) {
    out += std::to_string(plan.wholly_excluded.size())
           + " operators of the data have no included row:\n";
    for (auto& [op, n] : plan.wholly_excluded)
      out += "  " + op + " (" + std::to_string(n) + " rows)\n";
  }
  return out;
}

} // namespace bb
