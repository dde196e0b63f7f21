#include "results/resume.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "results/journal.hpp"
#include "results/reports.hpp"
#include "suite/shards.hpp"

namespace bb {

using json = nlohmann::json;

// A field added later takes its default when an older sweep.json lacks it (conditions, kept
// since format 1); args and cwd are required.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(sweep_record, BB_FIELDS_SWEEP_RECORD)

std::string write_sweep_record(const std::string& run_dir, const sweep_record& r) {
  json j = r;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec)
    return "cannot create " + run_dir + ": " + ec.message();
  return write_file_atomically(std::filesystem::path(run_dir) / "sweep.json", j.dump(2) + "\n");
}

std::string read_sweep_record(const std::string& run_dir, sweep_record& out) {
  auto path = run_dir + "/sweep.json";
  std::ifstream in(path);
  if (!in)
    return path + ": missing (not a bbcluster run folder, or one whose sweep wrote no reports)";
  try {
    auto j = json::parse(in);
    (void)j.at("args");
    (void)j.at("cwd");
    // Sweeps recorded before conditions were kept have none: nothing to compare.
    out = j.get<sweep_record>();
  } catch (const json::exception& e) {
    return path + ": " + e.what();
  }
  return "";
}

std::vector<std::string> resume_args(const sweep_record& r, const std::string& run_dir,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (size_t i = 0; i < r.args.size(); ++i) {
    auto& a = r.args[i];
    if (a == "--log-dir" || a == "--resume") {
      ++i; // and its value
      continue;
    }
    if (a == "--disable-output-logs" || a.rfind("--log-dir=", 0) == 0 || a.rfind("--resume=", 0) == 0)
      continue;
    out.push_back(a);
  }
  out.insert(out.end(), {"--log-dir", run_dir, "--resume", run_dir});
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

namespace {

// Whether two condition values say the same: equal text, or the same number.
bool same_value(const std::string& a, const std::string& b) {
  if (a == b)
    return true;
  auto number = [](const std::string& text, double& out) {
    char* end = nullptr;
    out = std::strtod(text.c_str(), &end);
    return !text.empty() && end == text.c_str() + text.size();
  };
  double x = 0, y = 0;
  return number(a, x) && number(b, y) && x == y;
}

} // namespace

std::vector<std::string> changed_conditions(const std::map<std::string, std::string>& then,
                                            const std::map<std::string, std::string>& now,
                                            int then_format) {
  std::vector<std::string> out;
  auto shown = [](const std::map<std::string, std::string>& m, const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("(none)") : it->second;
  };
  // What format 1 could not have said the same way.
  auto unrecorded = [&](const std::string& key) {
    if (then_format >= 2)
      return false;
    if ((key == "device" || key == "torch version") && shown(now, key).rfind("each node's own", 0) == 0)
      return true;
    return then.count(key) == 0 && key.rfind("kernel ", 0) != 0;
  };
  std::set<std::string> keys;
  for (auto& [k, v] : then)
    keys.insert(k);
  for (auto& [k, v] : now)
    keys.insert(k);
  for (auto& k : keys)
    if (!unrecorded(k) && !same_value(shown(then, k), shown(now, k)))
      out.push_back(k + ": " + shown(then, k) + " then, " + shown(now, k) + " now");
  return out;
}

std::string shell_command(const std::string& program, const std::vector<std::string>& args) {
  auto quoted = [](const std::string& word) {
    if (!word.empty() && word.find_first_of(" \t\n'\"$`\\*?[]{}~#!;&|<>()") == std::string::npos)
      return word;
    std::string out = "'";
    for (char c : word)
      out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  auto out = quoted(program);
  for (auto& a : args)
    out += " " + quoted(a);
  return out;
}

std::string resume_command_for(const std::string& run_dir) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto program = ec ? std::string("bbcluster") : exe.string();
  auto dir = std::filesystem::absolute(run_dir, ec).lexically_normal().string();
  return shell_command(program, {"--resume", dir});
}

std::string recorded_command(const sweep_record& r) {
  return shell_command("bbcluster", r.args);
}

std::vector<eval_result> shards_to_keep(const op_inputs& op, const std::vector<eval_result>& lines) {
  auto work = uniform_work(op);
  std::vector<unit_range> covered;
  std::vector<eval_result> out;
  for (auto& r : lines) {
    auto& s = r.shard;
    if (r.version != 0 || s.correctness_total != op.correctness.size()
        || s.performance_total != op.performance.size()
        || s.correctness_begin + s.correctness_count > s.correctness_total
        || s.performance_begin + s.performance_count > s.performance_total)
      continue;
    auto units = units_of(work, s);
    bool again = std::any_of(units.begin(), units.end(), [&](const unit_range& u) {
      return std::any_of(covered.begin(), covered.end(),
                         [&](const unit_range& c) { return u.begin < c.end && c.begin < u.end; });
    });
    if (again)
      continue;
    covered.insert(covered.end(), units.begin(), units.end());
    out.push_back(r);
  }
  return out;
}

bool covers_every_input(const op_inputs& op, const std::vector<eval_result>& shards) {
  auto work = uniform_work(op);
  std::vector<unit_range> covered;
  for (auto& r : shards)
    for (auto& u : units_of(work, r.shard))
      covered.push_back(u);
  return !shards.empty() && units_left(work, covered).empty();
}

std::string read_journal_state(const std::string& path, journal_state& out) {
  std::ifstream in(path);
  if (!in)
    return path + ": cannot be read";
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty())
      continue;
    try {
      auto j = json::parse(line);
      auto event = j.value("event", "");
      auto r = parse_journal_line(line);
      if (event == "job_finished") {
        out.finished[r.op_name] = std::move(r);
      } else if (event == "shard_finished") {
        out.shards[r.op_name].push_back(std::move(r));
      } else if (event == "version_evaluated") {
        auto& list = out.versions[r.op_name];
        auto same = std::find_if(list.begin(), list.end(),
                                 [&](const eval_result& x) { return x.version == r.version; });
        if (same != list.end())
          *same = std::move(r);
        else
          list.push_back(std::move(r));
      }
    } catch (const std::exception& e) {
      out.problems.push_back(path + ":" + std::to_string(number) + ": " + e.what());
    }
  }
  return "";
}

} // namespace bb
