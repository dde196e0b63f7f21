// Simulated cluster benchmark: the real bbcluster, real bbnodes on this machine (the local
// launcher) and the real protocol, with sim_runner (sim/sim_runner.cpp) in every slot in
// place of bbrunner: it waits the modelled time of each input (sim/sim_model.hpp) instead of
// evaluating. Sweeps the whole included set of BackendBench's problems on 1, 8, 64 and 256
// simulated GPUs, sharded and not (scheduler.shards), and with one node of four killed
// halfway, and prints per run: the makespan, the ideal makespan (total work / GPUs), the
// efficiency, the coordinator's CPU per job and share of a core, and the messages per second
// its actor handled.
//
// Modelled time runs faster than the clock by a factor chosen per run so that each run takes
// about --wall seconds (never slower than real time); makespans are given in modelled seconds.
// The coordinator's own overhead is real time and so is magnified by that factor: the factor
// is printed with each row.
//
//   bench_cluster [--data FILE] [--gpus 1,8,64,256] [--wall 20] [--no-kill] [--keep]

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/sim_model.hpp"
#include "suite/plan.hpp"

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string data = BB_TRACES_DIR "/backendbench/backend_bench_problems_included.txt";
  std::vector<size_t> gpus = {1, 8, 64, 256};
  double wall = 20.0;
  bool kill = true;
  bool keep = false;
};

// The modelled work of the sweep, as the simulated runners spend it.
struct workload {
  bb::suite work;
  bb::runner_options opts;
  double total = 0.0;
  double largest_op = 0.0;
  size_t inputs = 0;

  double seconds_of(const std::string& op_name, const nlohmann::json& span) const {
    for (auto& op : work.ops) {
      if (op.op_name != op_name)
        continue;
      bool paired = op.correctness == op.performance;
      double sum = 0.0;
      auto cb = span.value("correctness_begin", 0u), cc = span.value("correctness_count", 0u);
      for (auto i = cb; i < cb + cc && i < op.correctness.size(); ++i)
        sum += bb::sim::input_seconds(op_name, op.correctness[i], opts, paired);
      if (!paired) {
        auto pb = span.value("performance_begin", 0u), pc = span.value("performance_count", 0u);
        for (auto i = pb; i < pb + pc && i < op.performance.size(); ++i)
          sum += bb::sim::input_seconds(op_name, op.performance[i], opts, true);
      }
      return span.empty() ? bb::sim::op_seconds(op, opts) : sum;
    }
    return 0.0;
  }
};

struct run_spec {
  size_t gpus = 1;
  bool shards = true;
  bool kill = false;
};

struct run_outcome {
  bool ok = false;
  std::string why;
  double speedup = 1.0;
  size_t nodes = 1;
  // From the coordinator's own account of the sweep.
  double wall_s = 0.0;
  double cpu_s = 0.0;
  uint64_t dispatched = 0;
  uint64_t messages = 0;
  // A node killed halfway: when (wall seconds after the coordinator started), what it cost.
  double killed_at_s = -1.0;
  size_t killed_slots = 0;
  size_t requeued = 0;
  double requeued_work = 0.0;
  size_t other_requeues = 0;
};

std::string bin(const std::string& name) {
  return std::string(BB_BIN_DIR) + "/" + name;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// bbnode children of `parent` whose command line names `node`.
std::vector<pid_t> node_processes(pid_t parent, const std::string& node) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  while (auto* entry = proc ? ::readdir(proc) : nullptr) {
    pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0)
      continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto close = text.rfind(')');
    if (close == std::string::npos || std::atoi(text.c_str() + close + 4) != parent)
      continue;
    std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
    std::string words((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::replace(words.begin(), words.end(), '\0', ' ');
    if (words.find("bbnode") != std::string::npos && words.find("--name " + node + " ") != std::string::npos)
      out.push_back(pid);
  }
  if (proc)
    ::closedir(proc);
  return out;
}

// The pace line the coordinator logs when every operator is terminal.
bool read_pace(const std::string& line, run_outcome& out) {
  auto at = line.find("operators terminal after ");
  if (at == std::string::npos)
    return false;
  unsigned long long dispatched = 0, messages = 0;
  if (std::sscanf(line.c_str() + at, "operators terminal after %lf s: %llu jobs dispatched, %llu messages handled, %lf s of CPU",
                  &out.wall_s, &dispatched, &messages, &out.cpu_s) != 4)
    return false;
  out.dispatched = dispatched;
  out.messages = messages;
  return true;
}

class sim_run {
public:
  sim_run(const options& o, const workload& w, run_spec spec, fs::path dir)
    : o_(o), w_(w), spec_(spec), dir_(std::move(dir)) {
  }

  run_outcome go() {
    fs::create_directories(dir_);
    out_.nodes = spec_.gpus <= 1 ? 1 : spec_.gpus <= 8 ? 2 : 4;
    double expected = w_.total / static_cast<double>(spec_.gpus);
    if (!spec_.shards)
      expected = std::max(expected, w_.largest_op);
    out_.speedup = std::max(1.0, expected / o_.wall);
    write_inputs();
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0)
      return fail("no pipe");
    pid_t pid = start(pipe_fds[1]);
    ::close(pipe_fds[1]);
    std::thread killer;
    if (spec_.kill)
      killer = std::thread([&] { kill_halfway(pid, expected / out_.speedup / 2); });
    read_log(pipe_fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    done_ = true;
    if (killer.joinable())
      killer.join();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return fail("bbcluster exited with " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1)
                  + " (see " + (dir_ / "bbcluster.log").string() + ")");
    if (out_.wall_s <= 0)
      return fail("no pace line from the coordinator");
    read_journal();
    return out_;
  }

private:
  run_outcome fail(const std::string& why) {
    out_.why = why;
    return out_;
  }

  void write_inputs() {
    std::string hosts;
    for (size_t i = 0; i < out_.nodes; ++i)
      hosts += "node" + std::to_string(i) + " slots=" + std::to_string(spec_.gpus / out_.nodes) + "\n";
    write(dir_ / "hosts.txt", hosts);
    write(dir_ / "settings.toml",
          "[evaluator]\ndevice = \"cuda\"\nrunner = \"" + bin("sim_runner") + "\"\nsandbox = \"off\"\n"
          "[timing]\nreference_cache = false\n"
          "[nodes]\nheartbeat_s = 0.5\nsilence_s = 3.0\n"
          "[scheduler]\nshards = \"" + std::string(spec_.shards ? "auto" : "off") + "\"\n");
  }

  pid_t start(int log_fd) {
    auto speedup = std::to_string(out_.speedup);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("BBCLUSTER_SIM_SPEEDUP", speedup.c_str(), 1);
      ::dup2(log_fd, 2);
      std::freopen((dir_ / "stdout").c_str(), "w", stdout);
      auto bbcluster = bin("bbcluster");
      ::execl(bbcluster.c_str(), "bbcluster", "--suite", "torchbench", "--data", o_.data.c_str(),
              "--nodes", (dir_ / "hosts.txt").c_str(), "--launcher", "local", "--config",
              (dir_ / "settings.toml").c_str(), "--log-dir", (dir_ / "run").c_str(), "--quiet",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  }

  // bbcluster's log, kept in the run's folder; marks when the coordinator starts and reads
  // its pace line at the end.
  void read_log(int fd) {
    std::ofstream log(dir_ / "bbcluster.log");
    FILE* in = ::fdopen(fd, "r");
    char buf[8192];
    while (std::fgets(buf, sizeof(buf), in)) {
      std::string line = buf;
      log << line;
      if (line.find("coordinator: ") != std::string::npos && line.find(" operators over ") != std::string::npos) {
        started_at_ = clock_type::now();
        started_ = true;
      }
      read_pace(line, out_);
    }
    std::fclose(in);
  }

  // Kills the last node `after` wall seconds into the sweep.
  void kill_halfway(pid_t sweep, double after) {
    while (!started_ && !done_)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto when = started_at_ + std::chrono::duration<double>(after);
    while (!done_ && clock_type::now() < when)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto victim = "node" + std::to_string(out_.nodes - 1);
    for (auto pid : node_processes(sweep, victim)) {
      ::kill(pid, SIGKILL);
      out_.killed_at_s = std::chrono::duration<double>(clock_type::now() - started_at_).count();
      out_.killed_slots = spec_.gpus / out_.nodes;
    }
  }

  // What the journal says: every operator finished, and the jobs a lost node cost.
  void read_journal() {
    std::ifstream in(dir_ / "run/results.jsonl");
    size_t finished = 0;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["event"] == "job_finished") {
        ++finished;
        if (j["outcome"] != "ok")
          out_.why = "operator " + j["op_name"].get<std::string>() + " ended " + j["outcome"].get<std::string>();
      } else if (j["event"] == "job_requeued") {
        auto lost = j["detail"].get<std::string>().find("lost") != std::string::npos;
        (lost ? out_.requeued : out_.other_requeues) += 1;
        if (lost)
          out_.requeued_work += w_.seconds_of(j["op_name"], j.value("shard", nlohmann::json::object()));
      }
    }
    if (finished != w_.work.ops.size() && out_.why.empty())
      out_.why = std::to_string(finished) + " of " + std::to_string(w_.work.ops.size()) + " operators finished";
    out_.ok = out_.why.empty();
  }

  const options& o_;
  const workload& w_;
  run_spec spec_;
  fs::path dir_;
  run_outcome out_;
  std::atomic<bool> started_{false}, done_{false};
  clock_type::time_point started_at_;
};

workload load(const options& o) {
  workload w;
  auto plan = bb::make_plan({"torchbench", o.data, {}, 0, false, false});
  if (!plan.fatal.empty()) {
    std::fprintf(stderr, "bench_cluster: %s\n", plan.fatal.c_str());
    std::exit(2);
  }
  w.work = plan.work;
  w.opts.device = "cuda";
  for (auto& op : w.work.ops) {
    double s = bb::sim::op_seconds(op, w.opts);
    w.total += s;
    w.largest_op = std::max(w.largest_op, s);
    w.inputs += op.correctness.size();
  }
  return w;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--data") {
      o.data = value();
    } else if (a == "--wall") {
      o.wall = std::atof(value().c_str());
    } else if (a == "--no-kill") {
      o.kill = false;
    } else if (a == "--keep") {
      o.keep = true;
    } else if (a == "--gpus") {
      o.gpus.clear();
      std::stringstream list(value());
      for (std::string n; std::getline(list, n, ',');)
        o.gpus.push_back(std::stoul(n));
    } else {
      std::fprintf(stderr, "usage: bench_cluster [--data FILE] [--gpus 1,8,64,256] [--wall S] [--no-kill] [--keep]\n");
      std::exit(2);
    }
  }
  return o;
}

void print_row(const workload& w, const run_spec& spec, const run_outcome& r) {
  double makespan = r.wall_s * r.speedup;
  double ideal = w.total / static_cast<double>(spec.gpus);
  std::printf("| %5zu | %-6s | %5.1f | %9.1f | %8.1f | %5.3f | %6llu | %8.2f | %5.2f | %7.0f |", spec.gpus,
              spec.shards ? "auto" : "off", r.speedup, makespan, ideal, ideal / makespan,
              static_cast<unsigned long long>(r.dispatched),
              r.dispatched ? 1000.0 * r.cpu_s / static_cast<double>(r.dispatched) : 0.0, r.cpu_s / r.wall_s,
              static_cast<double>(r.messages) / r.wall_s);
  if (!spec.kill) {
    std::printf("\n");
    return;
  }
  // The ideal when k of N slots stop at T: N slots until T, N - k after, for the work alone
  // (what losing the slots costs), and for the work and the requeued shards' whole work again
  // (a bound on what losing what they held costs too; only their part done by T was lost).
  auto n = static_cast<double>(spec.gpus), k = static_cast<double>(r.killed_slots);
  double at = r.killed_at_s * r.speedup;
  double slots_lost = at + (w.total - n * at) / (n - k);
  double work_lost = at + (w.total + r.requeued_work - n * at) / (n - k);
  std::printf(" killed %zu slots at %.1f s: %zu shards requeued (%.1f s of work), %zu other requeues;"
              " ideal with the slots lost %.1f s, and their shards redone %.1f s\n",
              r.killed_slots, at, r.requeued, r.requeued_work, r.other_requeues, slots_lost, work_lost);
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  auto w = load(o);
  std::printf("bench_cluster: %zu operators, %zu inputs, %.0f s of modelled work on one GPU (largest "
              "operator %.0f s)\n\n", w.work.ops.size(), w.inputs, w.total, w.largest_op);
  std::printf("| GPUs  | shards | scale | makespan  | ideal    | eff.  | jobs   | CPU/job  | cores | msgs/s  |\n");
  std::printf("|-------|--------|-------|-----------|----------|-------|--------|----------|-------|---------|\n");
  std::fflush(stdout);
  char tmpl[] = "/tmp/bench_cluster-XXXXXX";
  fs::path root = ::mkdtemp(tmpl);
  std::vector<run_spec> runs;
  for (auto n : o.gpus)
    for (bool shards : {true, false})
      runs.push_back({n, shards, false});
  if (o.kill)
    for (auto n : o.gpus)
      if (n >= 64)
        runs.push_back({n, true, true});
  int rc = 0;
  for (auto& spec : runs) {
    auto name = std::to_string(spec.gpus) + (spec.shards ? "-auto" : "-off") + (spec.kill ? "-kill" : "");
    auto r = sim_run(o, w, spec, root / name).go();
    if (!r.ok) {
      std::printf("| %5zu | %-6s | failed: %s\n", spec.gpus, spec.shards ? "auto" : "off", r.why.c_str());
      rc = 1;
    } else {
      print_row(w, spec, r);
    }
    std::fflush(stdout);
  }
  std::printf("\nscale: modelled seconds per wall second; makespan and ideal in modelled seconds; "
              "CPU/job: the coordinator process's CPU ms per job dispatched; cores: its CPU over the "
              "sweep's wall time; msgs/s: messages its coordinator actor handled per wall second; "
              "a sweep on one slot is never split; a killed node is lost after nodes.silence_s = 3 "
              "wall seconds\n");
  if (!o.keep) {
    std::error_code ec;
    fs::remove_all(root, ec);
  } else {
    std::printf("runs kept in %s\n", root.c_str());
  }
  return rc;
}
