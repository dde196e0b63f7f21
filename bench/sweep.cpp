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
// procedure) and on (the default), in that order and again in reverse, with the wall time of
// each and the ratio of on over off, the flags and verdicts each gave, and how far aten's
// speedups against itself stray from 1.
//
// For each: the wall time, the time spent inside the timer (profile.json), their ratio, and
// the largest phases; then the warm run's wall over the cold one's, and the adaptive timer's
// wall over the default's with the median absolute deviation of its speedups from run 1's.
//
//   bench_sweep [--quick | --checks] [--data TRACE] [--keep DIR]

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
#include <vector>

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
  size_t flagged = 0;                      // operators with any flag
  size_t correct = 0;                      // operators correct on every input
  bool ok = false;
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

run_figures run(const std::string& name, const std::string& data, const std::string& flags,
                const fs::path& dir) {
  run_figures f;
  f.name = name;
  auto logs = dir / name;
  fs::remove_all(logs);
  auto cmd = std::string(BB_BIN_DIR "/bbcluster --suite torchbench --backend aten --data ") + data
             + " " + flags + " --log-dir " + logs.string() + " --log-level warning >" + (dir / (name + ".out")).string()
             + " 2>" + (dir / (name + ".err")).string();
  auto start = std::chrono::steady_clock::now();
  int rc = std::system(cmd.c_str());
  f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  f.scores = read(dir / (name + ".out"));
  if (rc != 0) {
    std::fprintf(stderr, "bench_sweep: %s failed (%d):\n%s\n", name.c_str(), rc,
                 read(dir / (name + ".err")).c_str());
    return f;
  }
  try {
    auto profile = json::parse(read(logs / "profile.json"));
    f.timer_s = profile.at("timer_seconds").get<double>();
    for (auto& [phase, seconds] : profile.at("total_seconds").items())
      f.phases.emplace_back(seconds.get<double>(), phase);
    std::sort(f.phases.rbegin(), f.phases.rend());
    for (auto& row : json::parse(read(logs / "full_results.json")))
      if (row.contains("speedup") && row.value("successfully_ran", false)) {
        f.speedups[row["op_name"].get<std::string>() + " | " + row["args"].get<std::string>()] =
          row["speedup"].get<double>();
        ++f.inputs;
      }
    std::ifstream journal(logs / "results.jsonl");
    for (std::string line; std::getline(journal, line);) {
      auto j = json::parse(line);
      if (j.value("event", "") != "job_finished")
        continue;
      if (!j.value("flags", json::array()).empty())
        ++f.flagged;
      bool all = !j["correctness"].empty();
      for (auto& c : j["correctness"])
        all = all && c.value("is_correct", false);
      f.correct += all ? 1 : 0;
    }
    f.ok = true;
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

double median_abs_deviation(const run_figures& a, const run_figures& b) {
  std::vector<double> d;
  for (auto& [key, s] : a.speedups)
    if (auto it = b.speedups.find(key); it != b.speedups.end())
      d.push_back(std::fabs(s - it->second));
  if (d.empty())
    return NAN;
  std::sort(d.begin(), d.end());
  return d[d.size() / 2];
}

double median_abs_from_one(const run_figures& a) {
  std::vector<double> d;
  for (auto& [key, s] : a.speedups)
    d.push_back(std::fabs(s - 1.0));
  if (d.empty())
    return NAN;
  std::sort(d.begin(), d.end());
  return d[d.size() / 2];
}

} // namespace

// The exploit checks' cost: the same sweep with them off and on, twice in alternating order so
// that a drift of the machine does not favour either.
int checks_cost(const std::string& data, const fs::path& dir) {
  auto off1 = run("topn1_checks_off", data, "--topn 1 --no-reference-cache --no-exploit-checks", dir);
  print(off1);
  auto on1 = run("topn1_checks_on", data, "--topn 1 --no-reference-cache", dir);
  print(on1);
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
  std::printf("\nscores, checks on:\n%s", on1.scores.c_str());
  return off1.ok && on1.ok && on2.ok && off2.ok ? 0 : 1;
}

int main(int argc, char** argv) {
  bool quick = false;
  bool checks = false;
  std::string data = BB_TRACES_DIR "/backendbench/backend_bench_problems_included.txt";
  fs::path dir = fs::temp_directory_path() / "bench_sweep";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--checks")
      checks = true;
    else if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--keep" && i + 1 < argc)
      dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_sweep [--quick | --checks] [--data TRACE] [--keep DIR]\n");
      return 2;
    }
  }
  fs::create_directories(dir);
  if (checks)
    return checks_cost(data, dir);
  auto cache = dir / "reference_cache";
  fs::remove_all(cache);
  std::ofstream(dir / "cache.toml") << "[timing]\nreference_cache_dir = \"" << cache.string() << "\"\n";
  std::ofstream(dir / "cache5.toml") << "[timing]\nreference_cache_dir = \"" << (dir / "cache5").string() << "\"\n";
  fs::remove_all(dir / "cache5");
  auto with_cache = "--config " + (dir / "cache.toml").string();

  auto cold = run("topn1_cold", data, "--topn 1 " + with_cache, dir);
  print(cold);
  auto warm = run("topn1_warm", data, "--topn 1 " + with_cache, dir);
  print(warm);
  auto five = run("topn5_cold", data, "--topn 5 --config " + (dir / "cache5.toml").string(), dir);
  print(five);
  auto adaptive = run("topn1_adaptive", data, "--topn 1 --timer adaptive --no-reference-cache", dir);
  print(adaptive);
  run_figures twenty;
  if (!quick) {
    twenty = run("topn20_adaptive", data, "--topn 20 --timer adaptive --no-reference-cache", dir);
    print(twenty);
  }
  std::printf("\n");
  std::printf("topn 1 cold: wall / timer %.2f (goal <= 1.15)\n", cold.timer_s > 0 ? cold.wall_s / cold.timer_s : 0.0);
  std::printf("topn 5 cold: wall / timer %.2f (goal <= 1.15)\n", five.timer_s > 0 ? five.wall_s / five.timer_s : 0.0);
  std::printf("warm cache / cold: wall %.2f (goal <= 0.60)\n", cold.wall_s > 0 ? warm.wall_s / cold.wall_s : 0.0);
  std::printf("adaptive / do_bench (topn 1): wall %.2f (goal <= 0.25), median |speedup difference| %.4f "
              "(goal <= 0.02)\n",
              cold.wall_s > 0 ? adaptive.wall_s / cold.wall_s : 0.0, median_abs_deviation(adaptive, cold));
  std::printf("aten against aten, topn 1 cold: median |speedup - 1| %.4f (goal <= 0.02)\n", median_abs_from_one(cold));
  if (!quick && twenty.ok)
    std::printf("adaptive topn 20 / topn 1: wall %.2f for %.1fx the inputs\n",
                adaptive.wall_s > 0 ? twenty.wall_s / adaptive.wall_s : 0.0,
                adaptive.inputs ? static_cast<double>(twenty.inputs) / adaptive.inputs : 0.0);
  std::printf("\nscores, topn 1 cold:\n%s", cold.scores.c_str());
  return cold.ok && warm.ok && five.ok && adaptive.ok ? 0 : 1;
}
