// Reporter benchmark: the reporter alone, detached as bbcluster spawns it, over 100, 1,000 and
// 10,000 simulated operators, side by side in one run, each writing its real reports into a
// temporary folder. A result is a runner's: six inputs, each with its correctness record and
// its timing, the job's phases, now and then an incorrect input, a crash or a flag. Results
// come at a simulated rate (slots finishing operators at RATE a second in all), and as fast as
// they can be sent. Prints per case the wall time (first result to the final reports), the
// reporter's CPU (its own handlers, from profile.json), its CPU per operator and its rewrites
// of the growing reports; then the ratio of CPU per operator at 10,000 to 100 operators, which
// stays near 1 when the reporter's work is linear. For comparison, the behaviour before the
// pace (every report rewritten after every operator, --reports-interval 0) at 100 and 1,000.
//
//   bench_reporter [--rate RESULTS_PER_S] [--interval S] [--no-old]

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "actors/reporter.hpp"
#include "cluster/config.hpp"
#include "messages/errors.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

const char* shapes[] = {"[64]", "[256, 256]", "[1024, 1024]", "[8, 3, 224, 224]", "[4096]",
                        "[32, 128, 768]"};
const char* dtypes[] = {"f32", "f16", "bf16"};

// What every result says it was measured with, as an evaluator writes it.
const std::map<std::string, std::string>& measured_with() {
  static const auto settings = bb::result_settings_of(bb::runner_options{}, 600.0, 120.0);
  return settings;
}

// Operator `i`'s result, with the fields a runner fills; the same for the same `i`.
bb::eval_result simulated_result(size_t i) {
  uint64_t seed = 0x9e3779b97f4a7c15ull * (i + 1);
  auto next = [&seed] {
    seed ^= seed >> 12;
    seed ^= seed << 25;
    seed ^= seed >> 27;
    return static_cast<double>((seed * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
  };
  bb::eval_result r;
  r.job_id = i + 1;
  r.attempt = 1;
  r.op_name = "aten.sim_op" + std::to_string(i) + ".default";
  r.where = {"node" + std::to_string(i % 4), "cuda:0", "580.65", "2.11.0", "sha256:" + std::to_string(seed),
             static_cast<uint32_t>(i % 8), "namespaces", measured_with()};
  r.wall_seconds = 2.0 + 3.0 * next();
  r.phases = {{"runner_start", 0.0},    {"load_kernel", 0.05},    {"build_inputs", 0.1},
              {"reference_calls", 0.2}, {"kernel_calls", 0.2},    {"compare", 0.05},
              {"honesty", 0.02},        {"time_reference", 1.0},  {"time_kernel", 1.0},
              {"moving_results", 0.01}, {"waiting", 0.001}};
  if (i % 50 == 7) {
    r.outcome = bb::outcome::crashed;
    r.detail = "runner killed by signal 11 (SIGSEGV)";
    return r;
  }
  for (size_t k = 0; k < 6; ++k) {
    auto args = std::string("((T(") + shapes[k] + ", " + dtypes[(i + k) % 3] + "), T(" + shapes[k] + ", "
                + dtypes[(i + k) % 3] + "),), {'alpha': 0.5})";
    bb::correctness_record c;
    c.op_name = r.op_name;
    c.args = args;
    c.is_correct = next() > 0.05;
    c.max_abs_error = c.is_correct ? 1e-6 * next() : 0.5;
    c.max_rel_error = c.is_correct ? 1e-5 * next() : 0.3;
    if (!c.is_correct) {
      c.error_msg = "Tensor-likes are not close! Mismatched elements: 17 / 65536 (0.0%)";
      c.error_type = "AssertionError";
      c.traceback = "Traceback (most recent call last):\n  File \"kernel.py\", line 12\nAssertionError";
    }
    r.correctness.push_back(c);
    bb::performance_record p;
    p.op_name = r.op_name;
    p.args = args;
    p.successfully_ran = true;
    p.reference_time_ms = 0.1 + next();
    p.speedup = 0.5 + 1.5 * next();
    p.benchmark_time_ms = p.reference_time_ms / p.speedup;
    p.speedup_ci_low = p.speedup * 0.97;
    p.speedup_ci_high = p.speedup * 1.03;
    p.timing_rounds = 5;
    p.reference_round_means_ms = {p.reference_time_ms, p.reference_time_ms * 1.01, p.reference_time_ms * 0.99};
    p.timer = "do_bench";
    r.performance.push_back(p);
  }
  if (i % 97 == 3)
    r.flags.push_back("mutates_input");
  return r;
}

struct run_case {
  size_t ops = 0;
  /// Results a second; 0: as fast as they can be sent.
  double rate = 0.0;
  double interval_s = 2.0;
};

struct measured {
  double wall_s = -1;
  double cpu_s = 0;
  size_t rewrites = 0;
  double rewrite_s = 0;
};

measured run(const run_case& c, const std::vector<bb::eval_result>& results, const std::string& dir) {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  std::map<std::string, uint64_t> inputs;
  for (size_t i = 0; i < c.ops; ++i)
    inputs[results[i].op_name] = 12;
  bb::reporter_config rcfg;
  rcfg.log_dir = dir;
  rcfg.command = "bench_reporter";
  rcfg.expected_jobs = c.ops;
  rcfg.board = std::make_shared<bb::progress_board>(inputs);
  rcfg.reports_interval_s = c.interval_s;
  rcfg.conditions = {{"timing.timer", "do_bench"}, {"device", "cuda"}};
  caf::scoped_actor self{sys};
  auto start = clock_type::now();
  auto reporter = sys.spawn<caf::detached>(bb::reporter, std::move(rcfg));
  for (size_t i = 0; i < c.ops; ++i) {
    if (c.rate > 0)
      std::this_thread::sleep_until(start + std::chrono::duration_cast<clock_type::duration>(
                                              std::chrono::duration<double>(static_cast<double>(i) / c.rate)));
    self->send(reporter, bb::atom::result_v, results[i]);
  }
  measured m;
  self->request(reporter, caf::infinite, bb::atom::finish_v)
    .receive([&](bb::sweep_report&) { m.wall_s = std::chrono::duration<double>(clock_type::now() - start).count(); },
             [&](caf::error& err) { std::fprintf(stderr, "bench_reporter: %s\n", bb::describe(err).c_str()); });
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
  std::ifstream in(dir + "/profile.json");
  auto load = nlohmann::json::parse(in)["reporter"];
  m.cpu_s = load["cpu_seconds"].get<double>();
  m.rewrites = load["rewrites"].get<size_t>();
  m.rewrite_s = load["rewrite_seconds"].get<double>();
  return m;
}

double per_op_ms(const measured& m, size_t ops) {
  return 1e3 * m.cpu_s / static_cast<double>(ops);
}

void print_row(const char* name, const run_case& c, const measured& m) {
  char rate[32];
  if (c.rate > 0)
    std::snprintf(rate, sizeof(rate), "%.0f/s", c.rate);
  else
    std::snprintf(rate, sizeof(rate), "max");
  std::printf("  %-8s %6zu %8s %9.1f %8.2f %12.3f %9zu %11.2f\n", name, c.ops, rate, m.wall_s, m.cpu_s,
              per_op_ms(m, c.ops), m.rewrites, m.rewrite_s);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  double rate = 1000;
  double interval = 2.0;
  bool old = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rate" && i + 1 < argc)
      rate = std::stod(argv[++i]);
    else if (a == "--interval" && i + 1 < argc)
      interval = std::stod(argv[++i]);
    else if (a == "--no-old")
      old = false;
    else {
      std::fprintf(stderr, "usage: bench_reporter [--rate RESULTS_PER_S] [--interval S] [--no-old]\n");
      return 2;
    }
  }
  // Logged as bbcluster logs them (every result at info), to nowhere.
  auto logger = spdlog::null_logger_mt("bench_reporter");
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);
  char tmpl[] = "/tmp/bench-reporter-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::vector<bb::eval_result> results;
  for (size_t i = 0; i < 10000; ++i)
    results.push_back(simulated_result(i));
  std::printf("the reporter (detached) over simulated operators: 6 inputs each, real reports in %s;\n"
              "growing reports at most every %.1f s (more apart when a rewrite takes long)\n",
              dir.c_str(), interval);
  std::printf("  %-8s %6s %8s %9s %8s %12s %9s %11s\n", "case", "ops", "rate", "wall s", "CPU s",
              "CPU/op ms", "rewrites", "rewrite s");
  size_t n = 0;
  auto folder = [&] { return dir + "/run" + std::to_string(++n); };
  std::map<std::pair<double, size_t>, measured> paced;
  for (double r : {rate, 0.0})
    for (size_t ops : {100, 1000, 10000}) {
      run_case c{ops, r, interval};
      auto m = run(c, results, folder());
      paced[{r, ops}] = m;
      print_row("paced", c, m);
    }
  std::vector<std::pair<run_case, measured>> before;
  if (old)
    for (size_t ops : {100, 1000}) {
      run_case c{ops, 0.0, 0.0};
      auto m = run(c, results, folder());
      print_row("each op", c, m);
      before.emplace_back(c, m);
    }
  for (double r : {rate, 0.0}) {
    auto& small = paced[{r, 100}];
    auto& large = paced[{r, 10000}];
    std::printf("CPU per operator at 10,000 / at 100 operators, %s: %.2f\n",
                r > 0 ? ("at " + std::to_string(static_cast<int>(r)) + " results/s").c_str() : "as fast as possible",
                per_op_ms(large, 10000) / per_op_ms(small, 100));
  }
  if (before.size() == 2)
    std::printf("before the pace (every report after every operator): CPU per operator at 1,000 / at "
                "100: %.2f; at 1,000 operators %.1fx the paced reporter's CPU\n",
                per_op_ms(before[1].second, 1000) / per_op_ms(before[0].second, 100),
                before[1].second.cpu_s / paced[{0.0, 1000}].cpu_s);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
