#include "results/reports.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <unistd.h>

#include "results/journal.hpp"

namespace bb {

namespace {

using json = nlohmann::json;

std::string fmt4(double x, const char* suffix) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f%s", x, suffix);
  return buf;
}

std::string fmt2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", x);
  return buf;
}

} // namespace

std::string write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  // What failed, with errno's text; the temporary (empty or half written) goes.
  auto failed = [&](const std::string& what) {
    int why = errno;
    ::unlink(tmp.c_str());
    return what + ": " + std::strerror(why);
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    return failed("cannot write " + path.string());
  for (size_t done = 0; done < text.size();) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      auto err = failed("cannot write " + path.string());
      ::close(fd);
      return err;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return failed("cannot write " + path.string());
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return failed("cannot rename " + tmp.string() + " to " + path.string());
  return "";
}

std::string write_final_file(const std::filesystem::path& path, const std::string& text) {
  auto err = write_file_atomically(path, text);
  std::error_code ec;
  if (!err.empty() && std::filesystem::remove(path, ec))
    err += " (its earlier version, written before the end, removed)";
  return err;
}

namespace {

std::string dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

struct op_rows {
  std::vector<const correctness_record*> correctness;
  std::vector<const performance_record*> performance;
};

json sorted_by_op_and_args(json list) {
  std::stable_sort(list.begin(), list.end(), [](const json& a, const json& b) {
    return std::tie(a["op_name"].get_ref<const std::string&>(), a["args"].get_ref<const std::string&>())
           < std::tie(b["op_name"].get_ref<const std::string&>(), b["args"].get_ref<const std::string&>());
  });
  return list;
}

std::string summary_csv(const std::map<std::string, op_rows>& by_op) {
  static const char* fields[] = {"operator",
                                 "total_tests",
                                 "correctness_tests",
                                 "performance_tests",
                                 "passed_correctness_tests",
                                 "passed_performance_tests",
                                 "failed_correctness_tests",
                                 "failed_performance_tests",
                                 "correctness_rate",
                                 "avg_speedup",
                                 "geomean_speedup",
                                 "max_absolute_error",
                                 "max_relative_error"};
  std::string out;
  for (size_t i = 0; i < std::size(fields); ++i)
    out += (i ? "," : "") + std::string(fields[i]);
  out += "\r\n";
  for (auto& [op, rows] : by_op) {
    size_t passed_c = 0, passed_p = 0;
    double max_abs = 0, max_rel = 0;
    std::vector<double> speedups;
    for (auto* c : rows.correctness) {
      passed_c += c->is_correct;
      max_abs = std::max(max_abs, c->max_abs_error);
      max_rel = std::max(max_rel, c->max_rel_error);
    }
    for (auto* p : rows.performance) {
      passed_p += p->successfully_ran;
      // BackendBench keeps truthy speedups; a failed input's is None.
      if (p->successfully_ran && p->speedup != 0.0)
        speedups.push_back(p->speedup);
    }
    double avg = 0.0;
    for (auto x : speedups)
      avg += x;
    avg = speedups.empty() ? 0.0 : avg / static_cast<double>(speedups.size());
    auto nc = rows.correctness.size();
    auto np = rows.performance.size();
    std::vector<std::string> cells = {
      csv_field(op),
      std::to_string(nc + np),
      std::to_string(nc),
      std::to_string(np),
      std::to_string(passed_c),
      std::to_string(passed_p),
      std::to_string(nc - passed_c),
      std::to_string(np - passed_p),
      python_float(nc ? static_cast<double>(passed_c) / static_cast<double>(nc) : 0.0),
      python_float(avg),
      python_float(speedups.empty() ? 0.0 : geomean(speedups)),
      python_float(max_abs),
      python_float(max_rel)};
    for (size_t i = 0; i < cells.size(); ++i)
      out += (i ? "," : "") + cells[i];
    out += "\r\n";
  }
  return out;
}

// Says when kernels ran without a sandbox: evaluator.sandbox = "auto" on a node where
// namespaces could not be made, or "off".
std::string sandbox_note(const std::vector<eval_result>& results) {
  size_t bare = 0, off = 0;
  std::string why;
  for (auto& r : results) {
    if (r.where.sandbox.rfind("none: ", 0) == 0) {
      ++bare;
      why = r.where.sandbox.substr(6);
    } else if (r.where.sandbox == "off") {
      ++off;
    }
  }
  if (bare == 0 && off == 0)
    return "";
  std::string out = "\n## Sandbox\n\n";
  if (bare > 0)
    out += std::to_string(bare) + " of " + std::to_string(results.size())
           + " jobs ran without a sandbox (evaluator.sandbox = \"auto\"): " + why + ".\n";
  if (off > 0)
    out += std::to_string(off) + " of " + std::to_string(results.size())
           + " jobs ran with the sandbox off (evaluator.sandbox = \"off\").\n";
  return out;
}

// How many timed inputs had a figure in the reference-time cache, and how far their
// calibrations in this run lay from it: the figures that count are this run's.
std::string reference_note(const std::vector<eval_result>& results) {
  auto percent = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * x);
    return std::string(buf);
  };
  size_t timed = 0;
  std::vector<double> drift;
  for (auto& r : results)
    for (auto& p : r.performance) {
      if (!p.successfully_ran)
        continue;
      ++timed;
      if (p.reference_cached)
        drift.push_back(std::fabs(p.reference_drift));
    }
  if (drift.empty())
    return "";
  std::sort(drift.begin(), drift.end());
  auto replaced = static_cast<size_t>(std::count_if(drift.begin(), drift.end(), [](double d) { return d > 0.05; }));
  return "\n## Reference Times\n\n" + std::to_string(drift.size()) + " of " + std::to_string(timed)
         + " timed inputs had a reference time in the reference-time cache. Each was timed again in this run as a "
           "calibration (timing.reference_calibration of a full timing's calls, in every round beside the "
           "kernel), and that figure is the speedup's, never the cached one. The calibrations lay "
         + percent(drift[drift.size() / 2]) + " from the cached figures at the median, " + percent(drift.back())
         + " at most; " + std::to_string(replaced)
         + " lay more than 5% off and replaced them (`reference_drift` in each record).\n";
}

// A table cell's text on one line, without the pipes that would end the cell.
std::string cell_text(std::string text) {
  for (auto& ch : text) {
    if (ch == '|')
      ch = '/';
    else if (ch == '\n' || ch == '\r')
      ch = ' ';
  }
  return text;
}

// Every operator the checks flagged, with its flags, and each input whose outlying speedup
// was measured again: the first figure and the one that counts.
std::string flags_section(const std::vector<eval_result>& results) {
  std::map<std::string, std::set<std::string>> flagged;
  std::string remeasured;
  for (auto& r : results) {
    auto name = backendbench_op_name(r.op_name);
    for (auto& f : r.flags)
      flagged[name].insert(f);
    for (auto& p : r.performance)
      if (p.unverified_speedup > 0)
        remeasured += "| " + name + " | " + cell_text(p.args) + " | " + fmt4(p.unverified_speedup, "x")
                      + " | " + (p.successfully_ran ? fmt4(p.speedup, "x") : std::string("failed"))
                      + " |\n";
  }
  if (flagged.empty() && remeasured.empty())
    return "";
  std::string out = "\n## Flags\n\nWhat the checks against reward hacking found, per operator "
                    "(README, \"What bbcluster checks\").\n";
  if (!flagged.empty()) {
    out += "\n| Operator | Flags |\n|----------|-------|\n";
    for (auto& [op, flags] : flagged) {
      std::string list;
      for (auto& f : flags)
        list += (list.empty() ? "" : ", ") + f;
      out += "| " + op + " | " + list + " |\n";
    }
  }
  if (!remeasured.empty())
    out += "\n### Speedups measured again\n\nAbove checks.suspicious_speedup, an input is timed "
           "again with fresh inputs, the synchronized timer and twice the rounds; the second "
           "figure counts.\n\n| Operator | Input | First speedup | Re-verified speedup |\n"
           "|----------|-------|---------------|---------------------|\n" + remeasured;
  return out;
}

std::string overall_summary(const std::string& command, const std::map<std::string, op_rows>& by_op,
                            const scores& s, const std::vector<eval_result>& results,
                            const report_status& status) {
  auto p = python_float(s.p);
  std::string out = "# BackendBench Run Summary\n\n## Command\n```bash\n" + command + "\n```\n\n";
  if (!status.conditions.empty()) {
    // Once per sweep: what every figure below was measured with, on every node alike.
    out += "## Settings\n\nWhat the sweep was started with, on every node (each operator's own are in its "
           "record's provenance).\n\n| Setting | Value |\n|---------|-------|\n";
    for (auto& [key, value] : status.conditions)
      out += "| " + key + " | " + value + " |\n";
    out += "\n";
  }
  if (status.partial) {
    out += status.running ? "## Running\n\n" : "## Partial\n\n";
    out += std::to_string(results.size()) + " of " + std::to_string(status.ops_total)
           + " operators are in; the scores cover those only.";
    if (status.running)
      out += " These reports are rewritten every few seconds while the sweep runs.\n\n";
    else
      out += " The sweep was stopped before the end" + std::string(status.resume_command.empty() ? ".\n\n" :
             "; run the rest with:\n\n```bash\n" + status.resume_command + "\n```\n\n");
  }
  out += "## Results\n\n| Metric | Value |\n|--------|-------|\n";
  out += "| Correctness Score | " + fmt2(s.correctness) + " |\n";
  out += "| Performance Score (geomean speedup) | " + fmt2(s.performance) + " |\n";
  out += "| Perf@" + p + " Score | " + fmt2(s.perf_at_p) + " |\n\n";
  out += "### Metric Descriptions\n\n";
  out += "- **Correctness Score**: Mean pass rate over all operators\n";
  out += "- **Performance Score**: Geometric mean speedup over all operators\n";
  out += "- **Perf@" + p + " Score**: Rate of correct samples with a speedup greater than " + p + "\n\n";
  out += "## Output Files\n\nThe following files are saved in this directory:\n\n";
  out += "- `full_results.json`: Complete test results for all operators\n";
  out += "- `operator_summary.csv`: Operator-level summary statistics\n";
  out += "- `failed_tests.json`: Log of failed tests (if any)\n";
  out += "- `results.jsonl`: Journal of finished jobs, one line each, appended as they finish\n";
  out += "- `report.html`: The scores, operators, speedup chart and outcomes on one page\n";
  out += "- `operators/`: One record per operator\n";
  out += "- `OVERALL_SUMMARY.md`: This file\n";
  out += "### Operator Speedups vs Eager in Descending Order\n\n";
  out += "| Operator | Correctness Ratio | Speedup vs Eager |\n";
  out += "|----------|-----------|----------------|\n";
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  for (auto& [op, r] : by_op) {
    std::string correctness = "N/A", speedup = "N/A";
    if (!r.correctness.empty()) {
      double passed = 0;
      for (auto* c : r.correctness)
        passed += c->is_correct ? 1.0 : 0.0;
      correctness = fmt4(100.0 * passed / static_cast<double>(r.correctness.size()), "%");
    }
    if (!r.performance.empty()) {
      double sum = 0;
      for (auto* x : r.performance)
        sum += x->successfully_ran ? x->speedup : 1.0;
      speedup = fmt4(sum / static_cast<double>(r.performance.size()), "x");
    }
    rows.emplace_back(op, correctness, speedup);
  }
  // BackendBench sorts by (speedup text, correctness text), descending.
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) {
    return std::tie(std::get<2>(a), std::get<1>(a)) > std::tie(std::get<2>(b), std::get<1>(b));
  });
  for (auto& [op, c, sp] : rows)
    out += "| " + op + " | " + c + " | " + sp + "|\n";
  out += "\n## Jobs\n\n" + outcome_line(results) + "\n" + sandbox_note(results) + reference_note(results)
         + flags_section(results);
  if (!status.not_evaluated.empty()) {
    out += "\n## Not Evaluated\n\nThe backend does not implement these selected operators; they are "
           "not in the scores.\n\n| Operator | Reason |\n|----------|--------|\n";
    for (auto& [op, why] : status.not_evaluated)
      out += "| " + backendbench_op_name(op) + " | " + why + " |\n";
  }
  if (s.skipped > 0) {
    out += "\n## Skipped Operators\n\nNo input of these operators could run here; they are "
           "left out of the scores.\n\n| Operator | Reason |\n|----------|--------|\n";
    for (auto& op : s.ops)
      if (op.skipped) {
        auto why = cell_text(op.skip_reason.substr(0, op.skip_reason.find('\n')));
        out += "| " + backendbench_op_name(op.op_name) + " | " + why + " |\n";
      }
  }
  return out;
}

} // namespace

std::string outcome_line(const std::vector<eval_result>& results) {
  std::map<std::string, size_t> outcomes;
  std::map<std::string, size_t> flags;
  uint64_t restarts = 0;
  for (auto& r : results) {
    ++outcomes[to_string(r.outcome)];
    for (auto& f : r.flags)
      ++flags[f];
    restarts += r.runner_restarts;
  }
  std::string out = std::to_string(results.size()) + " jobs:";
  const char* sep = " ";
  for (auto& [name, n] : outcomes) {
    out += sep + name + " " + std::to_string(n);
    sep = ", ";
  }
  for (auto& [name, n] : flags)
    out += ", flagged " + name + " " + std::to_string(n);
  return out + "; " + std::to_string(restarts) + " runner restarts";
}

std::string backendbench_op_name(const std::string& op_name) {
  return op_name.rfind("aten.", 0) == 0 ? op_name.substr(5) : op_name;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos)
    return text;
  std::string out = "\"";
  for (char c : text)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

namespace {

// Each operator's rows, by BackendBench's name; with `all` and `failed`, every record too.
std::map<std::string, op_rows> rows_by_op(const std::vector<eval_result>& results, json* all, json* failed) {
  std::map<std::string, op_rows> by_op;
  for (auto& r : results) {
    auto name = backendbench_op_name(r.op_name);
    auto& rows = by_op[name];
    for (auto& c : r.correctness) {
      rows.correctness.push_back(&c);
      if (!all)
        continue;
      json j = c;
      j["op_name"] = name;
      all->push_back(j);
      if (!c.is_correct)
        failed->push_back(j);
    }
    for (auto& p : r.performance) {
      rows.performance.push_back(&p);
      if (!all)
        continue;
      json j = p;
      j["op_name"] = name;
      j.erase("reference_round_means_ms"); // what the reference-time cache keeps, not a report's
      // BackendBench records a failed input's speedup and kernel time as None.
      if (!p.successfully_ran) {
        j["speedup"] = nullptr;
        j["benchmark_time_ms"] = nullptr;
      }
      all->push_back(j);
      if (!p.successfully_ran)
        failed->push_back(j);
    }
  }
  return by_op;
}

} // namespace

namespace {

// Each failure on a line of its own.
void add_failure(std::string& errors, const std::string& err) {
  if (!err.empty())
    errors += (errors.empty() ? "" : "\n") + err;
}

// The reports rewritten while a sweep runs: the operator summary and OVERALL_SUMMARY.md;
// `write` is write_file_atomically while the sweep runs, write_final_file at its end.
std::string write_summaries(const std::filesystem::path& base, const std::string& command,
                            const std::map<std::string, op_rows>& by_op,
                            const std::vector<eval_result>& results, const scores& s,
                            const report_status& status,
                            std::string (*write)(const std::filesystem::path&, const std::string&)) {
  std::string errors;
  add_failure(errors, write(base / "operator_summary.csv", summary_csv(by_op)));
  add_failure(errors, write(base / "OVERALL_SUMMARY.md",
                            overall_summary(command, by_op, s, results, status)));
  return errors;
}

std::string make_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return ec ? "cannot create " + dir + ": " + ec.message() : "";
}

} // namespace

std::string write_growing_reports(const std::string& dir, const std::string& command,
                                  const std::vector<eval_result>& results, const scores& s,
                                  const report_status& status) {
  if (auto err = make_folder(dir); !err.empty())
    return err;
  return write_summaries(dir, command, rows_by_op(results, nullptr, nullptr), results, s, status,
                         write_file_atomically);
}

std::string write_operator_record(const std::string& dir, const eval_result& r,
                                  const std::vector<eval_result>& versions) {
  auto folder = std::filesystem::path(dir) / "operators";
  if (auto err = make_folder(folder.string()); !err.empty())
    return err;
  json j = r;
  j["op_name"] = backendbench_op_name(r.op_name);
  if (!versions.empty())
    j["versions"] = versions;
  return write_file_atomically(folder / (backendbench_op_name(r.op_name) + ".json"), dump(j));
}

std::string write_reports(const std::string& dir, const std::string& command,
                          const std::vector<eval_result>& results, const scores& s,
                          const report_status& status) {
  if (auto err = make_folder(dir); !err.empty())
    return err;
  json all = json::array();
  json failed = json::array();
  auto by_op = rows_by_op(results, &all, &failed);
  std::filesystem::path base(dir);
  std::string errors;
  add_failure(errors, write_final_file(base / "full_results.json", dump(sorted_by_op_and_args(all))));
  add_failure(errors, write_final_file(base / "failed_tests.json", dump(sorted_by_op_and_args(failed))));
  add_failure(errors, write_summaries(base, command, by_op, results, s, status, write_final_file));
  return errors;
}

} // namespace bb
