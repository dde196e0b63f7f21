#include "suite/shards.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <variant>

#include "suite/args.hpp"

namespace bb {

namespace {

// Memory bandwidth a kernel achieves, in bytes per ms: an H100/H200-class GPU, a server CPU.
constexpr double gpu_bytes_per_ms = 2.0e9;
constexpr double cpu_bytes_per_ms = 1.0e7;
// The shortest call: a kernel launch, or a CPU operator's dispatch.
constexpr double launch_ms = 0.01;
// What an input costs beyond its calls: progress frames, a comparison's bookkeeping.
constexpr double per_input_ms = 1.0;

double bandwidth(const std::string& device) {
  return device == "cuda" ? gpu_bytes_per_ms : cpu_bytes_per_ms;
}

// One side of do_bench (runner/timing.cpp): one call, five flushed calls for the estimate,
// warm-up calls within gpu_warmup_ms and flushed calls within gpu_rep_ms.
double do_bench_side_ms(double call_ms, const runner_options& opts) {
  double flush_ms = static_cast<double>(opts.flush_bytes) / gpu_bytes_per_ms;
  double estimate = call_ms + flush_ms;
  auto warmup = std::max(1.0, std::floor(opts.gpu_warmup_ms / estimate));
  auto repeat = std::max(1.0, std::floor(opts.gpu_rep_ms / estimate));
  return 6 * call_ms + 5 * flush_ms + warmup * call_ms + repeat * estimate;
}

// One side of cpu_bench: warm-up calls (stopped after a quarter of the budget) and the timed
// calls that fit the budget, at most cpu_runs.
double cpu_bench_side_ms(double call_ms, const runner_options& opts) {
  double budget = opts.cpu_max_seconds * 1000.0;
  auto warmup = static_cast<double>(std::max<int64_t>(1, opts.cpu_warmup));
  auto runs = static_cast<double>(opts.cpu_runs);
  if (budget <= 0)
    return (warmup + runs) * call_ms;
  double warm = std::min(warmup * call_ms, budget * 0.25 + call_ms);
  return warm + std::clamp(std::floor(budget / call_ms), 1.0, runs) * call_ms;
}

} // namespace

double call_ms_from_bytes(const std::string& call_text, const std::string& device) {
  auto parsed = args::parse_call(call_text);
  double bytes = std::holds_alternative<args::call>(parsed)
                   ? static_cast<double>(args::total_tensor_bytes(std::get<args::call>(parsed)))
                   : 0.0;
  return std::max(launch_ms, 2.0 * bytes / bandwidth(device));
}

double expected_input_seconds(double call_ms, const runner_options& opts, bool timed) {
  // Building the tensors, the reference and the kernel once each, and comparing.
  double ms = per_input_ms + 4 * call_ms;
  if (timed) {
    double side = opts.device == "cuda" ? do_bench_side_ms(call_ms, opts) : cpu_bench_side_ms(call_ms, opts);
    ms += 2 * side;
  }
  return ms / 1000.0;
}

double op_work::total() const {
  return std::accumulate(seconds.begin(), seconds.end(), 0.0);
}

op_work estimate_work(const op_inputs& op, const runner_options& opts, const known_call_times& known) {
  op_work w;
  w.paired = op.correctness == op.performance;
  w.correctness = static_cast<uint32_t>(op.correctness.size());
  w.performance = static_cast<uint32_t>(op.performance.size());
  auto cost = [&](const std::string& text, bool timed) {
    auto hit = known.find({op.op_name, text});
    double call = hit != known.end() ? hit->second : call_ms_from_bytes(text, opts.device);
    return expected_input_seconds(call, opts, timed);
  };
  for (auto& text : op.correctness)
    w.seconds.push_back(cost(text, w.paired));
  if (!w.paired)
    for (auto& text : op.performance)
      w.seconds.push_back(cost(text, true));
  return w;
}

op_work uniform_work(const op_inputs& op) {
  op_work w;
  w.paired = op.correctness == op.performance;
  w.correctness = static_cast<uint32_t>(op.correctness.size());
  w.performance = static_cast<uint32_t>(op.performance.size());
  w.seconds.assign(w.paired ? w.correctness : w.correctness + w.performance, 1.0);
  return w;
}

double seconds_of(const op_work& w, unit_range r) {
  return std::accumulate(w.seconds.begin() + r.begin, w.seconds.begin() + r.end, 0.0);
}

shard_span span_of(const op_work& w, unit_range r) {
  shard_span s;
  s.correctness_total = w.correctness;
  s.performance_total = w.performance;
  if (w.paired) {
    s.correctness_begin = s.performance_begin = r.begin;
    s.correctness_count = s.performance_count = r.end - r.begin;
    return s;
  }
  auto c = w.correctness;
  s.correctness_begin = std::min(r.begin, c);
  s.correctness_count = std::min(r.end, c) - s.correctness_begin;
  s.performance_begin = std::max(r.begin, c) - c;
  s.performance_count = std::max(r.end, c) - c - s.performance_begin;
  return s;
}

std::vector<unit_range> units_of(const op_work& w, const shard_span& s) {
  if (w.paired)
    return {{s.correctness_begin, s.correctness_begin + s.correctness_count}};
  std::vector<unit_range> out;
  if (s.correctness_count > 0)
    out.push_back({s.correctness_begin, s.correctness_begin + s.correctness_count});
  if (s.performance_count > 0)
    out.push_back({w.correctness + s.performance_begin, w.correctness + s.performance_begin + s.performance_count});
  return out;
}

std::vector<unit_range> units_left(const op_work& w, const std::vector<unit_range>& done) {
  std::vector<bool> covered(w.seconds.size(), false);
  for (auto& r : done)
    for (auto u = r.begin; u < r.end && u < covered.size(); ++u)
      covered[u] = true;
  std::vector<unit_range> out;
  for (uint32_t u = 0; u < covered.size(); ++u) {
    if (covered[u])
      continue;
    if (!out.empty() && out.back().end == u)
      ++out.back().end;
    else
      out.push_back({u, u + 1});
  }
  return out;
}

std::vector<unit_range> cut_shards(const op_work& w, const std::vector<unit_range>& todo, double target) {
  std::vector<unit_range> out;
  for (auto& run : todo) {
    if (run.end <= run.begin)
      continue;
    double sum = seconds_of(w, run);
    double pieces = target > 0 ? std::ceil(sum / target) : 1.0;
    pieces = std::clamp(pieces, 1.0, static_cast<double>(run.end - run.begin));
    double share = sum / pieces, done = 0.0;
    double made = 0.0;
    uint32_t begin = run.begin;
    for (uint32_t u = run.begin; u < run.end; ++u) {
      // A piece ends before the unit that would take it further past its boundary than it
      // now falls short of it.
      double boundary = share * (made + 1);
      if (u > begin && made + 1 < pieces && done + w.seconds[u] - boundary > boundary - done) {
        out.push_back({begin, u});
        begin = u;
        ++made;
      }
      done += w.seconds[u];
    }
    out.push_back({begin, run.end});
  }
  return out;
}

unit_range head_within(const op_work& w, unit_range r, double limit) {
  double sum = 0.0;
  auto end = r.begin;
  while (end < r.end && (end == r.begin || sum + w.seconds[end] <= limit))
    sum += w.seconds[end++];
  return {r.begin, end};
}

std::string span_text(const shard_span& s) {
  auto run = [](const char* what, uint32_t begin, uint32_t count, uint32_t total) {
    return std::string(what) + " " + std::to_string(begin + 1) + "-" + std::to_string(begin + count)
           + " of " + std::to_string(total);
  };
  bool paired = s.correctness_begin == s.performance_begin && s.correctness_count == s.performance_count
                && s.correctness_total == s.performance_total;
  if (paired || s.performance_count == 0)
    return run("inputs", s.correctness_begin, s.correctness_count, s.correctness_total);
  if (s.correctness_count == 0)
    return run("performance inputs", s.performance_begin, s.performance_count, s.performance_total);
  return run("inputs", s.correctness_begin, s.correctness_count, s.correctness_total) + ", "
         + run("performance inputs", s.performance_begin, s.performance_count, s.performance_total);
}

double shard_target(double total_seconds, size_t slots, double shards_per_slot, double max_shard_seconds) {
  if (shards_per_slot <= 0)
    return 0.0;
  double cap = max_shard_seconds > 0 ? max_shard_seconds : 0.0;
  if (slots < 2)
    return cap;
  double share = total_seconds / static_cast<double>(slots) / shards_per_slot;
  return cap > 0 ? std::min(share, cap) : share;
}

} // namespace bb
