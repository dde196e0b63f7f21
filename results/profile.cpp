#include "results/profile.hpp"

#include <algorithm>
#include <cstdio>

#include <sys/resource.h>
#include <time.h>

namespace bb {

const std::vector<std::string>& profile_phases() {
  static const std::vector<std::string> phases = {
    "runner_start", "load_kernel", "build_inputs", "reference_calls", "first_kernel_call", "kernel_calls",
    "compare",      "honesty",     "check_timed",  "time_reference",  "time_kernel",       "confirm_reference",
    "moving_results", "waiting"};
  return phases;
}

void add_to_profile(sweep_profile& p, const eval_result& r) {
  auto slot = r.where.node + "/" + std::to_string(r.where.slot);
  for (auto& [phase, seconds] : r.phases) {
    p.slots[slot][phase] += seconds;
    p.total[phase] += seconds;
  }
  ++p.jobs;
}

sweep_profile make_profile(const std::vector<eval_result>& results) {
  sweep_profile p;
  for (auto& r : results)
    add_to_profile(p, r);
  return p;
}

double process_cpu_seconds() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0)
    return 0.0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double thread_cpu_seconds() {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
    return 0.0;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

std::string format_reporter_load(const reporter_load& r) {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "reporter: %.2f s CPU for %zu results (%.2f ms each), %zu rewrites of the "
                "growing reports (%.2f s)",
                r.cpu_seconds, r.results,
                r.results ? 1000.0 * r.cpu_seconds / static_cast<double>(r.results) : 0.0,
                r.rewrites, r.rewrite_seconds);
  return buf;
}

std::string format_profile(const sweep_profile& p, const std::string& kept_in) {
  auto reporter = p.reporter.results ? format_reporter_load(p.reporter) + "\n" : std::string();
  if (p.total.empty())
    return reporter;
  static const std::map<std::string, std::string> short_names = {
    {"runner_start", "start"},     {"load_kernel", "load"},      {"build_inputs", "inputs"},
    {"reference_calls", "ref"},    {"first_kernel_call", "first"}, {"kernel_calls", "kernel"},   {"compare", "compare"},
    {"honesty", "honesty"},        {"check_timed", "chk_t"},     {"time_reference", "t_ref"},  {"time_kernel", "t_kernel"},
    {"confirm_reference", "confirm"}, {"moving_results", "move"}, {"waiting", "wait"}};
  std::string out = "profile: seconds per evaluator slot and phase"
                    + (kept_in.empty() ? std::string() : " (" + kept_in + " has them all)") + "\n";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-16s", "slot");
  out += buf;
  for (auto& phase : profile_phases()) {
    std::snprintf(buf, sizeof(buf), " %8s", short_names.at(phase).c_str());
    out += buf;
  }
  out += "\n";
  for (auto& [slot, phases] : p.slots) {
    std::snprintf(buf, sizeof(buf), "%-16s", slot.substr(0, 16).c_str());
    out += buf;
    for (auto& phase : profile_phases()) {
      auto it = phases.find(phase);
      std::snprintf(buf, sizeof(buf), " %8.2f", it == phases.end() ? 0.0 : it->second);
      out += buf;
    }
    out += "\n";
  }
  std::vector<std::pair<double, std::string>> largest;
  double sum = 0.0;
  for (auto& [phase, seconds] : p.total) {
    largest.emplace_back(seconds, phase);
    sum += seconds;
  }
  std::sort(largest.rbegin(), largest.rend());
  out += "largest phases:";
  for (size_t i = 0; i < largest.size() && i < 4; ++i) {
    std::snprintf(buf, sizeof(buf), " %s %.1f s (%.0f%%)%s", largest[i].second.c_str(), largest[i].first,
                  sum > 0 ? 100.0 * largest[i].first / sum : 0.0, i + 1 < std::min<size_t>(4, largest.size()) ? "," : "");
    out += buf;
  }
  return out + "\n" + reporter;
}

nlohmann::json profile_json(const sweep_profile& p) {
  nlohmann::json j = p;
  // Under the name the file has always had, and with the figures made from the fields.
  j["total_seconds"] = j["total"];
  j.erase("total");
  j["phases"] = profile_phases();
  double timer = 0.0;
  for (auto phase : {"time_reference", "time_kernel"})
    if (auto it = p.total.find(phase); it != p.total.end())
      timer += it->second;
  j["timer_seconds"] = timer;
  auto& r = p.reporter;
  j["reporter"]["cpu_ms_per_result"] = r.results ? 1000.0 * r.cpu_seconds / static_cast<double>(r.results) : 0.0;
  return j;
}

} // namespace bb
