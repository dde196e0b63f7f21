// Sweep benchmark (GPU): BackendBench's included set with the aten backend on one device, run
// by the real bbcluster several ways in one run, side by side:
//
//   1. --topn 1, reference-time cache cold          the sweep as a new user runs it
//   2. --topn 1 again, cache warm                   what a second sweep or a campaign costs
//   3. --topn 5, cache cold                         how cost grows with work
//   4. --topn 1 --timer adaptive, no cache          the adaptive timer against run 1
//   5. --topn 20 --timer adaptive, no cache         (unless --quick)
//
// With --checks, instead: --topn 1 without the cache, the exploit checks off (BackendBench's
// procedure) and on (the default), in that order and again in reverse (--once: off then on),
// with the wall time of each and the ratio of on over off, every phase side by side, the
// flags and verdicts each gave, the operators whose verdict the checks changed, the on/off
// ratio of every unflagged correct operator's speedups, and how far the speedups stray from 1
// (aten against itself). --backend picks the implementation (default aten; flag_gems for
// FlagGems' operators).
//
// With --full, instead: every input of the set (no --topn), one device, the adaptive timer
// without the reference cache (and, with --full-default too, the default timer): the wall
// time, inputs per second and the largest phases, against the goal of 10 minutes. --limit S
// interrupts each run after S seconds and prints its last progress line (operators and inputs
// done, inputs per second) instead.
//
// For each: the wall time, the time spent inside the timer (profile.json), their ratio, and
// the largest phases; then the warm run's wall over the cold one's, and the adaptive timer's
// wall over the default's with the median absolute deviation of its speedups from run 1's.
//
// With --graphs, instead: the smallest input of every operator with do_bench and with the
// cudagraph timer, twice each: aten against itself under both, and the spread of repeated
// measurements (GPU).
//
// With --cache, only runs 1 and 2, and how the warm run's calibrations drifted from the cached
// figures, with aten's speedups against itself had the cached figures counted as they were
// (the same run's speedups over 1 + drift) beside the calibrated ones. --ops narrows every run
// to those operators (a CPU machine runs --cache --ops with a subset in minutes).
//
//   bench_sweep [--quick | --cache | --checks [--once] | --full [--full-default] [--limit S] | --graphs] [--backend B]
//               [--data TRACE]
//               [--ops OPS] [--keep DIR]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct run_figures {
  std::string name;
  double wall_s = 0;
  double timer_s = 0;
  size_t inputs = 0;
  std::string scores;
  std::vector<std::pair<double, std::string>> phases;
  std::map<std::string, double> speedups; // op | args -> speedup
  std::map<std::string, double> kernel_ms; // op | args -> benchmark_time_ms
  std::map<std::string, std::string> timers; // op | args -> the timer its record names
  std::map<std::string, double> drifts;   // op | args -> reference_drift, where the cache had a figure
  size_t flagged = 0;                      // operators with any flag
  size_t correct = 0;                      // operators correct on every input
  std::map<std::string, std::string> verdict; // op -> "correct", "incorrect" or the outcome
  std::map<std::string, std::string> flags;   // op -> its flags, for flagged operators
  std::map<std::string, double> phase_seconds;
  // op -> (its jobs' wall seconds in the runner, its inputs): where a long sweep's time went.
  std::map<std::string, std::pair<double, size_t>> op_seconds;
  bool ok = false;
  bool stopped = false; // interrupted at its limit: the figures are those of its finished jobs
};

std::string backend = "aten";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last line of `text` that holds `what` ("" if none).
std::string last_line_with(const std::string& text, const std::string& what) {
  auto at = text.rfind(what);
  if (at == std::string::npos)
    return "";
  auto begin = text.rfind('\n', at);
  auto end = text.find('\n', at);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end == std::string::npos ? end : end - begin - 1);
}

// `limit_s` > 0: bbcluster is interrupted (SIGINT) after that many seconds, and what it had
// done by then is told from its progress lines (logged at info, every 30 s).
run_figures run(const std::string& name, const std::string& data, const std::string& flags,
                const fs::path& dir, int limit_s = 0) {
  run_figures f;
  f.name = name;
  auto logs = dir / name;
  fs::remove_all(logs);
  auto cmd = (limit_s > 0 ? "timeout -s INT -k 90 " + std::to_string(limit_s) + " " : std::string())
             + BB_BIN_DIR "/bbcluster --suite torchbench --backend " + backend + " --data " + data
             + " " + flags + " --log-dir " + logs.string() + " --log-level " + (limit_s > 0 ? "info" : "warning")
             + " >" + (dir / (name + ".out")).string() + " 2>" + (dir / (name + ".err")).string();
  auto start = std::chrono::steady_clock::now();
  int rc = std::system(cmd.c_str());
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.scores = read(dir / (name + ".out"));
  if (rc != 0) {
    auto err = read(dir / (name + ".err"));
    if (limit_s > 0) {
      std::printf("%-22s stopped after its limit of %d s (wall %.1f s); its last progress line:\n  %s\n",
                  name.c_str(), limit_s, f.wall_s, last_line_with(err, "progress: ").c_str());
      err = err.size() > 3000 ? err.substr(err.size() - 3000) : err;
    }
    std::fprintf(stderr, "bench_sweep: %s failed (%d):\n%s\n", name.c_str(), rc, err.c_str());
    // A sweep its limit stopped (timeout's status 124) still writes its reports and profile for
    // the jobs it finished: the figures below are theirs (f.ok stays false). A run that failed
    // otherwise has none to show.
    bool timed_out = WIFEXITED(rc) && WEXITSTATUS(rc) == 124;
    if (limit_s <= 0 || !timed_out || !fs::exists(logs / "profile.json"))
      return f;
    f.stopped = true;
  }
  try {
    auto profile = json::parse(read(logs / "profile.json"));
    f.timer_s = profile.at("timer_seconds").get<double>();
    for (auto& [phase, seconds] : profile.at("total_seconds").items()) {
      f.phases.emplace_back(seconds.get<double>(), phase);
      f.phase_seconds[phase] = seconds.get<double>();
    }
    std::sort(f.phases.rbegin(), f.phases.rend());
    for (auto& row : json::parse(read(logs / "full_results.json")))
      if (row.contains("speedup") && row.value("successfully_ran", false)) {
        // The reports name operators as BackendBench does ("relu.default"), the journal
        // with their namespace ("aten.relu.default"): keys take the journal's names.
        auto op = row["op_name"].get<std::string>();
        if (op.rfind("aten.", 0) != 0)
          op = "aten." + op;
        f.speedups[op + " | " + row["args"].get<std::string>()] = row["speedup"].get<double>();
        f.kernel_ms[op + " | " + row["args"].get<std::string>()] = row.value("benchmark_time_ms", 0.0);
        f.timers[op + " | " + row["args"].get<std::string>()] = row.value("timer", std::string());
        if (row.value("reference_cached", false))
          f.drifts[op + " | " + row["args"].get<std::string>()] = row.value("reference_drift", 0.0);
        ++f.inputs;
      }
    std::ifstream journal(logs / "results.jsonl");
    std::map<std::string, std::pair<double, size_t>> shard_seconds;
    for (std::string line; std::getline(journal, line);) {
      auto j = json::parse(line);
      if (j.value("event", "") == "shard_finished") {
        // An operator cut into shards: its shards' time, unless its whole record comes too.
        auto& spent = shard_seconds[j.value("op_name", std::string())];
        spent.first += j.value("wall_seconds", 0.0);
        spent.second += j.value("performance", json::array()).size();
      }
      if (j.value("event", "") != "job_finished")
        continue;
      auto op = j.value("op_name", std::string());
      auto& spent = f.op_seconds[op];
      spent.first += j.value("wall_seconds", 0.0);
      spent.second += j.value("performance", json::array()).size();
      if (!j.value("flags", json::array()).empty()) {
        ++f.flagged;
        f.flags[op] = j["flags"].dump();
      }
      bool all = !j["correctness"].empty();
      for (auto& c : j["correctness"])
        all = all && c.value("is_correct", false);
      f.correct += all ? 1 : 0;
      auto outcome = j.value("outcome", std::string("?"));
      f.verdict[op] = outcome != "ok" ? outcome : all ? "correct" : "incorrect";
    }
    for (auto& [op, spent] : shard_seconds)
      if (!f.op_seconds.count(op) || f.op_seconds[op].first <= 0)
        f.op_seconds[op] = spent;
    f.ok = !f.stopped;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sweep: %s: cannot read its reports: %s\n", name.c_str(), e.what());
  }
  return f;
}

void print(const run_figures& f) {
  std::printf("%-22s %8.1f s  timer %8.1f s  wall/timer %5.2f  timed inputs %5zu\n", f.name.c_str(),
              f.wall_s, f.timer_s, f.timer_s > 0 ? f.wall_s / f.timer_s : 0.0, f.inputs);
  std::printf("%-22s largest phases:", "");
  for (size_t i = 0; i < f.phases.size() && i < 5; ++i)
    std::printf(" %s %.1f s", f.phases[i].second.c_str(), f.phases[i].first);
  std::printf("\n");
}

// The median of |x| over `xs`; NAN when empty; with `p` another quantile.
double quantile_abs(std::vector<double> xs, double p = 0.5) {
  if (xs.empty())
    return NAN;
  for (auto& x : xs)
    x = std::fabs(x);
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(p * static_cast<double>(xs.size())))];
}

double median_abs_deviation(const run_figures& a, const run_figures& b) {
  std::vector<double> d;
  for (auto& [key, s] : a.speedups)
    if (auto it = b.speedups.find(key); it != b.speedups.end())
      d.push_back(s - it->second);
  return quantile_abs(d);
}

// The score line "perf@p significant ...: X" of a run's output; -1 when absent.
double significant_score(const run_figures& a) {
  auto at = a.scores.find("perf@p significant");
  if (at == std::string::npos)
    return -1.0;
  auto colon = a.scores.find("): ", at);
  return colon == std::string::npos ? -1.0 : std::atof(a.scores.c_str() + colon + 3);
}

double median_abs_from_one(const run_figures& a) {
  std::vector<double> d;
  for (auto& [key, s] : a.speedups)
    d.push_back(s - 1.0);
  return quantile_abs(d);
}

// A warm run's calibration against its cached figures: how far they drifted, and how far from 1
// aten's speedups against itself would lie had the cached figures counted as they were (the
// speedup over 1 + drift: the cached figure over the kernel's time now), beside the calibrated
// ones the run reports.
void print_calibration(const run_figures& warm) {
  std::vector<double> drift, as_cached;
  for (auto& [key, d] : warm.drifts) {
    drift.push_back(d);
    auto s = warm.speedups.find(key);
    if (s != warm.speedups.end() && d > -1.0)
      as_cached.push_back(s->second / (1.0 + d) - 1.0);
  }
  size_t over = static_cast<size_t>(std::count_if(drift.begin(), drift.end(), [](double d) { return std::fabs(d) > 0.05; }));
  std::printf("warm run: %zu of %zu timed inputs calibrated against the cache; |drift| median %.4f, p90 %.4f, "
              "over 5%% (replaced in the cache) %zu\n",
              drift.size(), warm.inputs, quantile_abs(drift), quantile_abs(drift, 0.9), over);
  std::printf("aten against aten, topn 1 warm, had the cached figures counted as they were: median |speedup - 1| "
              "%.4f (calibrated: %.4f)\n",
              quantile_abs(as_cached), median_abs_from_one(warm));
}

} // namespace

// Every phase of each run, side by side (seconds summed over the evaluator slots).
void print_phases(const std::vector<const run_figures*>& runs) {
  std::map<std::string, bool> names;
  for (auto* f : runs)
    for (auto& [phase, s] : f->phase_seconds)
      names[phase] = true;
  std::printf("\n%-18s", "phase (s)");
  for (auto* f : runs)
    std::printf(" %20s", f->name.c_str());
  std::printf("\n");
  for (auto& [phase, unused] : names) {
    std::printf("%-18s", phase.c_str());
    for (auto* f : runs) {
      auto it = f->phase_seconds.find(phase);
      std::printf(" %20.2f", it == f->phase_seconds.end() ? 0.0 : it->second);
    }
    std::printf("\n");
  }
}

// What the checks changed: verdicts, flags, and the speedups of operators unflagged and
// correct in both runs (on over off, per timed input).
void print_changes(const run_figures& off, const run_figures& on) {
  std::printf("\nverdicts changed by the checks:\n");
  size_t changed = 0;
  for (auto& [op, v] : off.verdict) {
    auto it = on.verdict.find(op);
    auto now = it == on.verdict.end() ? std::string("(missing)") : it->second;
    if (now != v) {
      ++changed;
      std::printf("  %s: %s -> %s %s\n", op.c_str(), v.c_str(), now.c_str(),
                  on.flags.count(op) ? on.flags.at(op).c_str() : "");
    }
  }
  std::printf("  %zu of %zu operators\n", changed, off.verdict.size());
  std::printf("flagged with the checks on:\n");
  for (auto& [op, flags] : on.flags)
    std::printf("  %s %s\n", op.c_str(), flags.c_str());
  std::vector<std::pair<double, std::string>> ratios;
  for (auto& [key, s_on] : on.speedups) {
    auto op = key.substr(0, key.find(" | "));
    auto it = off.speedups.find(key);
    if (it == off.speedups.end() || on.flags.count(op) || off.verdict.count(op) == 0
        || off.verdict.at(op) != "correct" || on.verdict.at(op) != "correct" || it->second <= 0)
      continue;
    ratios.emplace_back(s_on / it->second, key);
  }
  if (ratios.empty())
    return;
  std::sort(ratios.begin(), ratios.end());
  size_t within = 0;
  for (auto& [r, key] : ratios)
    within += std::fabs(r - 1.0) <= 0.05 ? 1 : 0;
  std::printf("speedup on / off, %zu inputs of operators correct and unflagged in both: median %.3f, "
              "within 5%%: %zu (%.0f%%), lowest %.3f, highest %.3f\n",
              ratios.size(), ratios[ratios.size() / 2].first, within, 100.0 * within / ratios.size(),
              ratios.front().first, ratios.back().first);
  std::printf("  the five lowest:");
  for (size_t i = 0; i < ratios.size() && i < 5; ++i)
    std::printf(" %s %.3f;", ratios[i].second.substr(0, ratios[i].second.find(" | ")).c_str(), ratios[i].first);
  std::printf("\n  the five highest:");
  for (size_t i = ratios.size() > 5 ? ratios.size() - 5 : 0; i < ratios.size(); ++i)
    std::printf(" %s %.3f;", ratios[i].second.substr(0, ratios[i].second.find(" | ")).c_str(), ratios[i].first);
  std::printf("\n");
}

// The whole set: every input, the adaptive timer (and the default one with `with_default`).
int full_set(const std::string& data, const fs::path& dir, bool with_default, int limit_s, const std::string& only) {
  std::vector<run_figures> runs;
  runs.push_back(run("all_adaptive", data, "--timer adaptive --no-reference-cache" + only, dir, limit_s));
  if (with_default)
    runs.push_back(run("all_do_bench", data, "--no-reference-cache" + only, dir, limit_s));
  bool ok = true;
  for (auto& f : runs) {
    print(f);
    std::printf("%-22s %zu timed inputs in %.1f s%s: %.1f inputs per second (goal: the whole set, 15,568, in < 600 s)\n",
                "", f.inputs, f.wall_s, f.stopped ? " (stopped: finished jobs only)" : "",
                f.wall_s > 0 ? f.inputs / f.wall_s : 0.0);
    std::printf("%-22s operators correct %zu, flagged %zu\n", "", f.correct, f.flagged);
    // The operators that cost most per input, by their jobs' time in the runner.
    std::vector<std::tuple<double, std::string, double, size_t>> per_input;
    for (auto& [op, spent] : f.op_seconds)
      if (spent.second > 0)
        per_input.emplace_back(spent.first / static_cast<double>(spent.second), op, spent.first, spent.second);
    std::sort(per_input.rbegin(), per_input.rend());
    std::printf("%-22s most seconds per timed input (operator: s/input, s, inputs):", "");
    for (size_t i = 0; i < per_input.size() && i < 8; ++i)
      std::printf("%s %s %.3f %.1f %zu", i ? ";" : "", std::get<1>(per_input[i]).c_str(), std::get<0>(per_input[i]),
                  std::get<2>(per_input[i]), std::get<3>(per_input[i]));
    std::printf("\n");
    ok = ok && f.ok;
  }
  std::vector<const run_figures*> all;
  for (auto& f : runs)
    all.push_back(&f);
  print_phases(all);
  std::printf("\nscores, %s:\n%s", runs.front().name.c_str(), runs.front().scores.c_str());
  return ok ? 0 : 1;
}

// Kernel-only timing (--timer cudagraph) against do_bench on launch-bound inputs: the smallest
// input of every operator, each timer twice in alternating order (do_bench, cudagraph,
// cudagraph, do_bench). Prints aten's |speedup - 1| against itself under each, the spread of
// the repeated measurements (|log| of one run's kernel time over the other's, per input), and
// how much of do_bench's time was the launch (cudagraph's time over do_bench's).
int graphs_vs_do_bench(const std::string& data, const fs::path& dir, const std::string& only) {
  auto flags = "--topn 1 --smallest-inputs --no-reference-cache" + only;
  auto d1 = run("smallest_do_bench", data, flags, dir);
  print(d1);
  auto g1 = run("smallest_cudagraph", data, flags + " --timer cudagraph", dir);
  print(g1);
  auto g2 = run("smallest_cudagraph_2", data, flags + " --timer cudagraph", dir);
  print(g2);
  auto d2 = run("smallest_do_bench_2", data, flags, dir);
  print(d2);
  auto spread = [](const run_figures& a, const run_figures& b, double q) {
    std::vector<double> d;
    for (auto& [key, t] : a.kernel_ms)
      if (auto it = b.kernel_ms.find(key); it != b.kernel_ms.end() && t > 0 && it->second > 0)
        d.push_back(std::log(t / it->second));
    return quantile_abs(d, q);
  };
  size_t fell_back = 0;
  for (auto* f : {&g1, &g2})
    for (auto& [key, timer] : f->timers)
      fell_back += timer != "cudagraph" ? 1 : 0;
  std::vector<double> ratio;
  for (auto& [key, t] : g1.kernel_ms)
    if (auto it = d1.kernel_ms.find(key); it != d1.kernel_ms.end() && it->second > 0 && g1.timers[key] == "cudagraph")
      ratio.push_back(t / it->second);
  std::printf("\naten against aten, smallest inputs: median |speedup - 1| do_bench %.4f and %.4f, cudagraph %.4f and "
              "%.4f (goal <= 0.02); perf@p significant do_bench %.2f, cudagraph %.2f\n",
              median_abs_from_one(d1), median_abs_from_one(d2), median_abs_from_one(g1), median_abs_from_one(g2),
              significant_score(d1), significant_score(g1));
  std::printf("the same input measured twice, |log(time 1 / time 2)|: do_bench median %.4f p90 %.4f, cudagraph median "
              "%.4f p90 %.4f (goal: cudagraph's smaller)\n",
              spread(d1, d2, 0.5), spread(d1, d2, 0.9), spread(g1, g2, 0.5), spread(g1, g2, 0.9));
  std::sort(ratio.begin(), ratio.end());
  std::printf("cudagraph's kernel time over do_bench's: median %.2f (below 1: do_bench timed the launch too); %zu "
              "records not timed by cudagraph (calls that cannot be captured; on a CPU, every one)\n",
              ratio.empty() ? NAN : ratio[ratio.size() / 2], fell_back);
  print_phases({&d1, &g1});
  return d1.ok && d2.ok && g1.ok && g2.ok ? 0 : 1;
}

// The exploit checks' cost: the same sweep with them off and on, twice in alternating order so
// that a drift of the machine does not favour either (`once`: off, then on).
int checks_cost(const std::string& data, const fs::path& dir, bool once) {
  auto off1 = run("topn1_checks_off", data, "--topn 1 --no-reference-cache --no-exploit-checks", dir);
  print(off1);
  auto on1 = run("topn1_checks_on", data, "--topn 1 --no-reference-cache", dir);
  print(on1);
  if (once) {
    std::printf("\nchecks on / off: wall %.2f: off %.1f s, on %.1f s (the second run finds compiles cached)\n",
                off1.wall_s > 0 ? on1.wall_s / off1.wall_s : 0.0, off1.wall_s, on1.wall_s);
    for (auto* f : {&off1, &on1})
      std::printf("%-22s operators correct %zu, flagged %zu, median |speedup - 1| %.4f\n", f->name.c_str(),
                  f->correct, f->flagged, median_abs_from_one(*f));
    print_phases({&off1, &on1});
    print_changes(off1, on1);
    std::printf("\nscores, checks off:\n%s", off1.scores.c_str());
    std::printf("\nscores, checks on:\n%s", on1.scores.c_str());
    return off1.ok && on1.ok ? 0 : 1;
  }
  auto on2 = run("topn1_checks_on_2", data, "--topn 1 --no-reference-cache", dir);
  print(on2);
  auto off2 = run("topn1_checks_off_2", data, "--topn 1 --no-reference-cache --no-exploit-checks", dir);
  print(off2);
  double off = off1.wall_s + off2.wall_s, on = on1.wall_s + on2.wall_s;
  std::printf("\nchecks on / off: wall %.2f (goal <= 1.10): off %.1f s and %.1f s, on %.1f s and %.1f s\n",
              off > 0 ? on / off : 0.0, off1.wall_s, off2.wall_s, on1.wall_s, on2.wall_s);
  for (auto* f : {&off1, &on1, &on2, &off2})
    std::printf("%-22s operators correct %zu, flagged %zu, median |speedup - 1| %.4f\n", f->name.c_str(),
                f->correct, f->flagged, median_abs_from_one(*f));
  print_phases({&off1, &on1, &on2, &off2});
  print_changes(off1, on1);
  std::printf("\nscores, checks on:\n%s", on1.scores.c_str());
  return off1.ok && on1.ok && on2.ok && off2.ok ? 0 : 1;
}

int main(int argc, char** argv) {
  bool quick = false;
  bool checks = false;
  bool once = false;
  bool full = false;
  bool full_default = false;
  bool cache_only = false;
  bool graphs = false;
  int limit_s = 0;
  std::string ops;
  std::string data = BB_TRACES_DIR "/backendbench/backend_bench_problems_included.txt";
  fs::path dir = fs::temp_directory_path() / "bench_sweep";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--checks")
      checks = true;
    else if (a == "--once")
      once = true;
    else if (a == "--full")
      full = true;
    else if (a == "--full-default")
      full = full_default = true;
    else if (a == "--cache")
      cache_only = true;
    else if (a == "--graphs")
      graphs = true;
    else if (a == "--limit" && i + 1 < argc)
      limit_s = std::atoi(argv[++i]);
    else if (a == "--ops" && i + 1 < argc)
      ops = argv[++i];
    else if (a == "--backend" && i + 1 < argc)
      backend = argv[++i];
    else if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--keep" && i + 1 < argc)
      dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_sweep [--quick | --cache | --checks [--once] | --full [--full-default] [--limit S] | --graphs] "
                           "[--backend B] [--data TRACE] [--ops OPS] [--keep DIR]\n");
      return 2;
    }
  }
  fs::create_directories(dir);
  if (checks)
    return checks_cost(data, dir, once);
  if (full)
    return full_set(data, dir, full_default, limit_s, ops.empty() ? std::string() : " --ops " + ops);
  if (graphs)
    return graphs_vs_do_bench(data, dir, ops.empty() ? std::string() : " --ops " + ops);
  auto cache = dir / "reference_cache";
  fs::remove_all(cache);
  std::ofstream(dir / "cache.toml") << "[timing]\nreference_cache_dir = \"" << cache.string() << "\"\n";
  std::ofstream(dir / "cache5.toml") << "[timing]\nreference_cache_dir = \"" << (dir / "cache5").string() << "\"\n";
  fs::remove_all(dir / "cache5");
  auto only = ops.empty() ? std::string() : " --ops " + ops;
  auto with_cache = "--config " + (dir / "cache.toml").string() + only;

  auto cold = run("topn1_cold", data, "--topn 1 " + with_cache, dir);
  print(cold);
  auto warm = run("topn1_warm", data, "--topn 1 " + with_cache, dir);
  print(warm);
  if (cache_only) {
    std::printf("\nwarm cache / cold: wall %.2f\n", cold.wall_s > 0 ? warm.wall_s / cold.wall_s : 0.0);
    std::printf("aten against aten, topn 1 cold: median |speedup - 1| %.4f, perf@p significant %.2f (goal 0.00)\n",
                median_abs_from_one(cold), significant_score(cold));
    std::printf("aten against aten, topn 1 warm: median |speedup - 1| %.4f (goal <= 0.02), perf@p significant %.2f "
                "(goal 0.00)\n",
                median_abs_from_one(warm), significant_score(warm));
    print_calibration(warm);
    return cold.ok && warm.ok ? 0 : 1;
  }
  auto five = run("topn5_cold", data, "--topn 5 --config " + (dir / "cache5.toml").string() + only, dir);
  print(five);
  auto adaptive = run("topn1_adaptive", data, "--topn 1 --timer adaptive --no-reference-cache" + only, dir);
  print(adaptive);
  run_figures twenty;
  if (!quick) {
    twenty = run("topn20_adaptive", data, "--topn 20 --timer adaptive --no-reference-cache" + only, dir);
    print(twenty);
  }
  std::printf("\n");
  std::printf("topn 1 cold: wall / timer %.2f (goal <= 1.15)\n", cold.timer_s > 0 ? cold.wall_s / cold.timer_s : 0.0);
  std::printf("topn 5 cold: wall / timer %.2f (goal <= 1.15)\n", five.timer_s > 0 ? five.wall_s / five.timer_s : 0.0);
  std::printf("warm cache / cold: wall %.2f (goal <= 0.60)\n", cold.wall_s > 0 ? warm.wall_s / cold.wall_s : 0.0);
  std::printf("adaptive / do_bench (topn 1): wall %.2f (goal <= 0.25), median |speedup difference| %.4f "
              "(goal <= 0.02)\n",
              cold.wall_s > 0 ? adaptive.wall_s / cold.wall_s : 0.0, median_abs_deviation(adaptive, cold));
  std::printf("aten against aten, topn 1 cold: median |speedup - 1| %.4f (goal <= 0.02), perf@p significant %.2f "
              "(goal 0.00)\n",
              median_abs_from_one(cold), significant_score(cold));
  // The warm run times the reference only as a calibration: its figures must be as honest.
  std::printf("aten against aten, topn 1 warm: median |speedup - 1| %.4f (goal <= 0.02), perf@p significant %.2f "
              "(goal 0.00)\n",
              median_abs_from_one(warm), significant_score(warm));
  print_calibration(warm);
  if (!quick && twenty.ok)
    std::printf("adaptive topn 20 / topn 1: wall %.2f for %.1fx the inputs\n",
                adaptive.wall_s > 0 ? twenty.wall_s / adaptive.wall_s : 0.0,
                adaptive.inputs ? static_cast<double>(twenty.inputs) / adaptive.inputs : 0.0);
  std::printf("\nscores, topn 1 cold:\n%s", cold.scores.c_str());
  return cold.ok && warm.ok && five.ok && adaptive.ok ? 0 : 1;
}
