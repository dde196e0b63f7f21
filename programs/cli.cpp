#include "programs/cli.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "artefacts/compiler.hpp"
#include "artefacts/reference_cache.hpp"
#include "results/results.hpp"
#include "generate/generation.hpp"
#include "results/resume.hpp"
#include "process/runner_supervisor.hpp"
#include "messages/errors.hpp"

namespace bb::program {

void add_flags(CLI::App& app, flags& f) {
  app.add_option("--suite", f.suite, "suite to run (facto is refused, with the reason)")
    ->check(CLI::IsMember({"smoke", "torchbench", "opinfo", "facto"}));
  app.add_option("--backend", f.backend, "where kernels come from")
    ->check(CLI::IsMember({"aten", "directory", "llm", "llm-relay", "kernel_agent", "flag_gems"}));
  app.add_option("--ops", f.ops, "comma-separated operators (full name, without aten., or base name)");
  app.add_option("--topn-inputs,--topn", f.topn, "keep the N largest inputs per operator")
    ->check(CLI::NonNegativeNumber);
  app.add_option("--llm-attempts,--llm-max-attempts", f.llm_attempts,
                 "kernel versions per operator, each after feedback on the last (llm, kernel_agent)")
    ->check(CLI::PositiveNumber);
  app.add_option("--llm-model,--llm-relay-model", f.llm_model, "model name (llm, llm-relay, kernel_agent)");
  app.add_option("--llm-provider", f.llm_provider,
                 "openai (chat completions: OpenAI, vLLM, Ollama, llama.cpp, relays) or anthropic; "
                 "kernel_agent: also relay (KernelAgent's relay), default the model's own")
    ->check(CLI::IsMember({"openai", "anthropic", "relay"}));
  app.add_option("--llm-base-url", f.llm_base_url,
                 "the model server's base URL, e.g. http://127.0.0.1:8000/v1 (default: "
                 "$OPENAI_BASE_URL or the provider's API)");
  app.add_option("--dsl,--llm-dsl", f.llm_dsl, "kernel language asked of the model (default triton)")
    ->check(CLI::IsMember(std::vector<std::string>(enum_names<kernel_dsl>::names,
                                                   enum_names<kernel_dsl>::names + enum_names<kernel_dsl>::count)));
  app.add_option("--kernel-agent-workers", f.ka_workers, "KernelAgent workers")
    ->check(CLI::PositiveNumber);
  app.add_option("--kernel-agent-max-rounds", f.ka_max_rounds, "KernelAgent rounds per worker")
    ->check(CLI::PositiveNumber);
  app.add_option("--kernel-agent-python", f.ka_python,
                 "the Python that has KernelAgent (triton_kernel_agent)");
  app.add_option("--ops-directory", f.ops_directory, "kernel folder (directory backend)");
  app.add_option("--log-dir,--output-dir", f.log_dir, "run folder (default backendbench_output_<timestamp>)");
  app.add_flag("--disable-output-logs", f.disable_output_logs, "write no report files");
  app.add_option("--p", f.p, "perf@p threshold")->check(CLI::PositiveNumber);
  app.add_option("--log-level", f.log_level, "DEBUG, INFO, WARNING or ERROR")
    ->transform(CLI::IsMember({"debug", "info", "warning", "error", "trace", "critical", "off"},
                              CLI::ignore_case));
  app.add_option("--data,--alternative-torchbench-data-path,--torchbench-data-path", f.data,
                 "torchbench inputs: trace file, folder of traces, .jsonl, or BackendBench's .parquet");
  app.add_option("--nodes", f.nodes, "hosts.txt (DeepSpeed hostfile format)");
  app.add_option("--launcher", f.launcher,
                 "how nodes start: none (already running), local (on this machine), ssh, or slurm "
                 "(inside an allocation, no hostfile needed)")
    ->check(CLI::IsMember({"none", "local", "ssh", "slurm"}));
  app.add_option("--config", f.config, "settings file (TOML), see configs/default.toml")
    ->check(CLI::ExistingFile);
  app.add_option("--resume", f.resume,
                 "run folder of an interrupted sweep: runs its recorded command again, leaving out "
                 "the operators its journal has finished (give no other flags)");
  app.add_option("--devices", f.devices, "evaluator slots (CPU slots on a machine without GPUs)")
    ->check(CLI::PositiveNumber);
  app.add_flag("--list", f.list, "print the selected operators with their input counts and exit");
  app.add_option("--timer", f.timer,
                 "do_bench (triton.testing.do_bench's procedure, the default), adaptive (stop "
                 "once the mean is known to timing.adaptive_rel_sem) or cudagraph (do_bench on "
                 "replays of each call captured in a CUDA graph: the device's time alone)")
    ->check(CLI::IsMember({"do_bench", "adaptive", "cudagraph"}));
  app.add_flag("--no-reference-cache", f.no_reference_cache,
               "time the reference (aten) afresh instead of reusing the reference-time cache");
  app.add_flag("--smallest-inputs", f.smallest_inputs,
               "keep the N smallest inputs per operator instead of the largest (a quick check of "
               "every operator on a small machine)");
  app.add_flag("--no-exploit-checks", f.no_exploit_checks,
               "BackendBench's procedure, for comparison: no fresh inputs per timed call, no "
               "checks of timed calls, no tamper checks (checks.exploits = false)");
  app.add_option("--extra-inputs", f.extra_inputs,
                 "also check each correctness input on signed values and on zeros, infinities "
                 "and NaN: auto (for the generative backends), on or off (checks.extra_inputs)")
    ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--set", f.set,
                 "KEY=VALUE: any setting of configs/default.toml (e.g. --set timing.rounds=3 "
                 "--set evaluator.sandbox=off), after --config and the other flags; repeatable");
  app.add_flag("--quiet", f.quiet, "no progress block or progress lines (log lines stay)");
  app.add_flag("--resume-anyway", f.resume_anyway,
               "with --resume: go on although the torch version, device, a setting of scope sweep "
               "(timing, checks, timeouts, sandbox, limits) or a kernel file changed since the sweep "
               "started");
  add_backendbench_flags(app, f);
}

std::string expand_resume(std::vector<std::string>& args) {
  std::string run_dir;
  std::vector<std::string> log_level, others, passed_on;
  bool resume = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    auto value = [&](const std::string& flag) -> std::optional<std::string> {
      if (a == flag && i + 1 < args.size())
        return args[++i];
      if (a.rfind(flag + "=", 0) == 0)
        return a.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (auto v = value("--resume")) {
      resume = true;
      run_dir = *v;
    } else if (auto l = value("--log-level")) {
      log_level = {"--log-level", *l};
    } else if (a == "--quiet" || a == "--resume-anyway") {
      passed_on.push_back(a);
    } else {
      others.push_back(a);
    }
  }
  if (!resume)
    return "";
  if (!others.empty())
    return "--resume RUN_DIR takes the sweep's flags from RUN_DIR/sweep.json; give no others "
           "(--log-level, --quiet and --resume-anyway aside), not " + others.front();
  std::error_code ec;
  auto dir = std::filesystem::absolute(run_dir, ec).lexically_normal().string();
  sweep_record record;
  if (auto err = read_sweep_record(dir, record); !err.empty())
    return "cannot resume: " + err;
  if (!std::filesystem::exists(dir + "/results.jsonl"))
    return "cannot resume: " + dir + "/results.jsonl is missing";
  // Relative paths of the recorded flags are relative to where the sweep was started.
  if (!record.cwd.empty() && ::chdir(record.cwd.c_str()) != 0)
    return "cannot resume: the sweep was started in " + record.cwd + ", which is gone";
  log_level.insert(log_level.end(), passed_on.begin(), passed_on.end());
  args = resume_args(record, dir, log_level);
  return "";
}

std::string read_resumed_sweep(const std::string& run_dir, const settings& s, const sweep_plan& plan,
                               resumed_sweep& out) {
  journal_state journal;
  if (auto err = read_journal_state(run_dir + "/results.jsonl", journal); !err.empty())
    return err;
  for (auto& p : journal.problems)
    spdlog::warn("bbcluster: {} (line left out; its job runs again)", p);
  version_policy policy;
  policy.max_versions = static_cast<uint32_t>(s.attempts);
  policy.improve_when_slow = s.improve_when_slow;
  policy.p = s.p;
  for (auto& op : plan.work.ops) {
    auto done = journal.finished.find(op.op_name);
    auto versions = journal.versions.find(op.op_name);
    if (versions != journal.versions.end())
      out.versions[op.op_name] = versions->second;
    if (done != journal.finished.end()) {
      out.previous.push_back(done->second);
      continue;
    }
    if (auto lines = journal.shards.find(op.op_name); lines != journal.shards.end()) {
      auto kept = shards_to_keep(op, lines->second);
      if (covers_every_input(op, kept)) {
        out.concluded.push_back(merge_shards(kept));
        continue;
      }
      if (!kept.empty())
        out.shards[op.op_name] = std::move(kept);
    }
    if (versions == journal.versions.end())
      continue;
    version_history h;
    uint32_t last = 0;
    for (auto& v : versions->second) {
      h.record(v);
      last = std::max(last, v.version);
    }
    if (h.wants_another(policy))
      out.first_versions[op.op_name] = last + 1;
    else
      out.concluded.push_back(h.standing());
  }
  spdlog::info("bbcluster: resuming {}: {} of {} operators finished before{}{}", run_dir,
               out.previous.size() + out.concluded.size(), plan.work.ops.size(),
               out.first_versions.empty()
                 ? std::string()
                 : ", " + std::to_string(out.first_versions.size()) + " go on from a later version",
               out.shards.empty()
                 ? std::string()
                 : ", " + std::to_string(out.shards.size()) + " go on from the shards they finished");
  return "";
}

void drop_resumed_ops(const resumed_sweep& r, sweep_plan& plan) {
  std::set<std::string> gone;
  for (auto& x : r.previous)
    gone.insert(x.op_name);
  for (auto& x : r.concluded)
    gone.insert(x.op_name);
  auto& ops = plan.work.ops;
  ops.erase(std::remove_if(ops.begin(), ops.end(),
                           [&](const op_inputs& op) { return gone.count(op.op_name) > 0; }),
            ops.end());
}

std::string merge_settings(const CLI::App& app, flags& f, settings& s) {
  if (!f.config.empty())
    if (auto err = load_settings(f.config, s))
      return describe(err);
  if (auto err = apply_backendbench_flags(app, f, s); !err.empty())
    return err;
  if (!f.log_dir.empty())
    s.log_dir = f.log_dir;
  if (app.count("--p"))
    s.p = f.p;
  if (f.devices > 0)
    s.devices = f.devices;
  if (!f.log_level.empty())
    s.log_level = f.log_level == "warning" ? "warn" : f.log_level;
  if (app.count("--llm-attempts"))
    s.attempts = f.llm_attempts;
  if (!f.llm_model.empty())
    s.llm_model = f.llm_model;
  if (!f.llm_provider.empty())
    (f.backend == "kernel_agent" ? s.ka_provider : s.llm_provider) = f.llm_provider;
  if (!f.llm_base_url.empty())
    s.llm_base_url = f.llm_base_url;
  if (!f.llm_dsl.empty())
    s.llm_dsl = f.llm_dsl;
  if (app.count("--kernel-agent-workers"))
    s.ka_workers = f.ka_workers;
  if (app.count("--kernel-agent-max-rounds"))
    s.ka_max_rounds = f.ka_max_rounds;
  if (!f.ka_python.empty())
    s.ka_python = f.ka_python;
  if (!f.timer.empty())
    s.timing.timer = f.timer;
  if (f.no_reference_cache)
    s.timing.reference_cache = false;
  if (f.no_exploit_checks)
    s.timing.exploit_checks = false;
  if (!f.extra_inputs.empty())
    s.extra_inputs = f.extra_inputs;
  for (auto& kv : f.set) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return "--set " + kv + ": give KEY=VALUE, e.g. --set timing.rounds=3";
    if (auto err = set_setting(s, kv.substr(0, eq), kv.substr(eq + 1), "--set " + kv))
      return describe(err);
  }
  if (f.backend == "directory" && f.ops_directory.empty())
    return "--backend directory needs --ops-directory DIR";
  if (auto err = validate(s))
    return describe(err);
  // The backend is final here: llm-relay became llm above, and flag_gems becomes a directory
  // sweep later, off either way.
  s.timing.extra_inputs = extra_inputs_for(s, f.backend);
  return "";
}

void report_plan(const sweep_plan& plan) {
  // A few lines say what is wrong; thousands (a binary file) would bury everything else.
  constexpr size_t shown = 5;
  for (size_t i = 0; i < plan.input_errors.size(); ++i)
    if (i < shown)
      spdlog::error("bbcluster: {} (line left out)", plan.input_errors[i]);
    else
      spdlog::debug("bbcluster: {} (line left out)", plan.input_errors[i]);
  if (plan.input_errors.size() > shown)
    spdlog::error("bbcluster: ... and {} more lines that do not parse (--log-level debug lists "
                  "them)", plan.input_errors.size() - shown);
  for (auto& w : plan.warnings)
    spdlog::warn("bbcluster: {}", w);
  if (!plan.skipped_ops.empty()) {
    spdlog::info("bbcluster: {} operators skipped as BackendBench's {} suite skips them",
                 plan.skipped_ops.size(), plan.work.name);
    for (auto& s : plan.skipped_ops)
      spdlog::debug("bbcluster: skipped {}", s);
  }
  if (plan.lines > 0)
    spdlog::info("bbcluster: {} input lines read, {} operators selected{}", plan.lines,
                 plan.work.ops.size(),
                 plan.excluded_rows ? ", " + std::to_string(plan.excluded_rows)
                                        + " rows not included_in_benchmark"
                                    : std::string());
  if (plan.not_overhead_rows > 0)
    spdlog::info("bbcluster: --check-overhead-dominated-ops left out {} rows not marked "
                 "is_overhead_dominated_op", plan.not_overhead_rows);
}

std::optional<std::vector<std::string>> resolve_ops(const std::vector<std::string>& names,
                                                    const settings& s, std::string& error) {
  char tmpl[] = "/tmp/bbcluster-resolve-XXXXXX";
  std::string scratch = ::mkdtemp(tmpl) ? tmpl : "/tmp";
  runner_supervisor runner;
  runner_spec spec;
  spec.program = s.runner.empty() ? default_runner_path() : s.runner;
  spec.log_path = scratch + "/runner.log";
  error = runner.start(spec, static_cast<int>(s.start_timeout_s * 1000));
  std::optional<std::vector<std::string>> schemas;
  if (error.empty()) {
    schemas = runner.resolve(names, 60000, error);
    runner.stop();
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  return schemas;
}

std::string attach_directory(const std::string& dir, const settings& s, sweep_plan& plan,
                             std::vector<directory_kernel>& kernels) {
  auto scan = scan_kernel_dir(dir);
  if (!scan.fatal.empty())
    return scan.fatal;
  for (auto& p : scan.problems)
    spdlog::error("bbcluster: {} (left out)", p);
  std::vector<std::string> names;
  for (auto& k : scan.kernels)
    names.push_back(k.op_name);
  std::string err;
  auto schemas = resolve_ops(names, s, err);
  if (!schemas)
    return "cannot look up the directory's operators: " + err;
  std::set<std::string> known;
  for (size_t i = 0; i < scan.kernels.size(); ++i) {
    if ((*schemas)[i].empty()) {
      spdlog::error("bbcluster: {}: unknown operator {} (no such aten operator in this torch; left out)",
                    scan.kernels[i].kernel.path, scan.kernels[i].op_name);
      continue;
    }
    known.insert(scan.kernels[i].op_name);
    kernels.push_back(scan.kernels[i]);
  }
  auto& ops = plan.work.ops;
  auto before = ops.size();
  ops.erase(std::remove_if(ops.begin(), ops.end(),
                           [&](const op_inputs& op) { return known.count(op.op_name) == 0; }),
            ops.end());
  spdlog::info("bbcluster: {} kernels in {}; {} of the {} selected operators have one", kernels.size(),
               dir, ops.size(), before);
  return "";
}

std::string command_line(const std::vector<char*>& words) {
  std::vector<std::string> args(words.begin() + (words.empty() ? 0 : 1), words.end());
  return shell_command("bbcluster", args);
}

std::string timestamped_dir() {
  auto t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "backendbench_output_%Y%m%d_%H%M%S", std::localtime(&t));
  return buf;
}

namespace {

// The models of this machine's NVIDIA GPUs ("NVIDIA H200, NVIDIA H200"), "" without any.
std::string gpu_models() {
  std::vector<std::string> models;
  std::error_code ec;
  for (auto& gpu : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream info(gpu.path() / "information");
    for (std::string line; std::getline(info, line);)
      if (line.rfind("Model:", 0) == 0)
        models.push_back(line.substr(line.find_first_not_of(" \t", 6)));
  }
  std::sort(models.begin(), models.end());
  std::string out;
  for (auto& m : models)
    out += (out.empty() ? "" : ", ") + m;
  return out;
}

} // namespace

std::map<std::string, op_work> estimate_sweep_work(const suite& work, const settings& s,
                                                   const std::string& device, bool with_cache) {
  auto opts = runner_options_of(s);
  opts.device = device;
  // CPU slots keep reference times only in a cache folder named on purpose (local_node).
  if (!with_cache || (device != "cuda" && s.timing.reference_cache_dir.empty()))
    opts.reference_cache_dir.clear();
  auto known = reference_cache(opts.reference_cache_dir).call_times(device);
  std::map<std::string, op_work> out;
  for (auto& op : work.ops)
    out[op.op_name] = estimate_work(op, opts, known);
  return out;
}

std::map<std::string, std::string> sweep_conditions(const settings& s,
                                                    const std::vector<directory_kernel>& kernels,
                                                    bool on_nodes) {
  auto out = sweep_conditions_of(s);
  if (on_nodes) {
    out["torch version"] = "each node's own (every result names its node's)";
    out["device"] = "each node's own (every result names its node's)";
  } else {
    out["torch version"] = default_toolchain().torch_version;
    auto gpus = gpu_models();
    bool cuda = s.device == "cuda" || (s.device == "auto" && count_gpus() > 0);
    out["device"] = cuda ? "cuda (" + (gpus.empty() ? std::string("unknown GPU") : gpus) + ")" : "cpu";
  }
  for (auto& k : kernels)
    out["kernel " + k.kernel.path] = k.kernel.hash;
  return out;
}

std::string check_resumed_conditions(const std::string& run_dir,
                                     const std::map<std::string, std::string>& now, bool anyway) {
  sweep_record record;
  if (auto err = read_sweep_record(run_dir, record); !err.empty())
    return err;
  if (record.conditions.empty())
    return ""; // recorded before conditions were kept
  auto changed = changed_conditions(record.conditions, now, record.format);
  if (changed.empty())
    return "";
  std::string list;
  for (auto& c : changed)
    list += "\n  " + c;
  if (anyway) {
    spdlog::warn("bbcluster: resuming although what the results depend on changed "
                 "(--resume-anyway):{}", list);
    return "";
  }
  return "cannot resume " + run_dir + ": what its results depend on changed since it started "
         "(give --resume-anyway to go on regardless):" + list;
}

} // namespace bb::program
