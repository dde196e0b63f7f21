#include "cluster/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include <toml++/toml.h>
#include <unistd.h>

#include "artefacts/reference_cache.hpp"
#include "bb_build_config.hpp"
#include "messages/errors.hpp"

namespace bb {

namespace {

using setter = std::function<bool(const toml::node&)>;

template <class T>
setter bind(T& target) {
  return [&target](const toml::node& n) {
    if constexpr (std::is_same_v<T, double>) {
      if (auto v = n.value<double>(); v && (n.is_floating_point() || n.is_integer())) {
        target = *v;
        return true;
      }
      return false;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!n.is_boolean())
        return false;
      target = *n.value<bool>();
      return true;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (!n.is_integer())
        return false;
      target = *n.value<int64_t>();
      return true;
    } else {
      if (!n.is_string())
        return false;
      target = *n.value<std::string>();
      return true;
    }
  };
}

const char* type_name_of(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", x);
  return buf;
}

/// What a number setting may be: within [lo, hi], lo itself excluded where lo_open; a
/// floating-point one also finite.
struct bounds {
  double lo;
  bool lo_open;
  double hi;
  const char* unit; ///< "seconds", "GiB", ...; "" for a plain number
  const char* note; ///< what a special value means ("0: never"); "" for none
};

struct key_info {
  setter set;
  const char* expected;
  /// "" when the value set is in range, else what it must be ("must be ..., not 1e+308").
  std::function<std::string()> check;
};

// Seconds a timeout or period may be at most: the evaluator passes milliseconds as an int.
constexpr double week_s = 7 * 24 * 3600.0;

template <class T>
key_info number(T& target, bounds b) {
  constexpr bool integer = std::is_same_v<T, int64_t>;
  auto check = [&target, b]() -> std::string {
    auto v = static_cast<double>(target);
    if (std::isfinite(v) && (b.lo_open ? v > b.lo : v >= b.lo) && v <= b.hi)
      return "";
    std::string what = integer ? "an integer" : "a finite number";
    if (*b.unit)
      what += std::string(" of ") + b.unit;
    what += std::string(" in ") + (b.lo_open ? "(" : "[") + number_text(b.lo) + ", "
            + number_text(b.hi) + "]";
    if (*b.note)
      what += std::string(" (") + b.note + ")";
    return "must be " + what + ", not "
           + (integer ? std::to_string(static_cast<int64_t>(target)) : number_text(v));
  };
  return {bind(target), integer ? "an integer" : "a number", check};
}

key_info text(std::string& target) {
  return {bind(target), "a string", {}};
}

key_info boolean(bool& target) {
  return {bind(target), "a boolean", {}};
}

/// A timeout or period: (0, hi] seconds.
key_info seconds(double& target, double hi = week_s) {
  return number(target, {0, true, hi, "seconds", ""});
}

/// A delay or budget that may be 0: [0, hi] seconds.
key_info delay(double& target, double hi, const char* note = "") {
  return number(target, {0, false, hi, "seconds", note});
}

/// A count: [lo, hi].
key_info count(int64_t& target, double lo, double hi, const char* note = "") {
  return number(target, {lo, false, hi, "", note});
}

/// Every key of a settings file, bound to its member of `s`, with its range.
std::map<std::string, key_info> setting_keys(settings& s) {
  auto& t = s.timing;
  return {
    {"run.log_dir", text(s.log_dir)},
    {"run.p", number(s.p, {0, false, 1000, "", ""})},
    {"run.grace_s", delay(s.grace_s, week_s)},
    {"evaluator.devices", count(s.devices, 0, 1024, "0: one per GPU, or one CPU slot")},
    {"evaluator.device", text(s.device)},
    {"evaluator.runner", text(s.runner)},
    {"evaluator.job_timeout_s", seconds(s.job_timeout_s)},
    {"evaluator.start_timeout_s", seconds(s.start_timeout_s)},
    {"evaluator.call_timeout_s", seconds(s.call_timeout_s)},
    {"evaluator.memory_limit_gb",
     number(s.memory_limit_gb, {0, false, 65536, "GiB", "0: 75% of memory over the slots"})},
    {"evaluator.cpu_threads", count(t.cpu_threads, 0, 4096, "0: torch's default")},
    {"evaluator.max_attempts", count(s.max_attempts, 1, 100)},
    {"evaluator.sandbox", text(s.sandbox)},
    {"evaluator.sandbox_tmp_mb", number(s.sandbox_tmp_mb, {1, false, 1 << 20, "MiB", ""})},
    {"evaluator.sandbox_max_processes", count(s.sandbox_max_processes, 1, 1 << 22)},
    {"evaluator.sandbox_max_file_mb",
     number(s.sandbox_max_file_mb, {1, false, 1 << 24, "MiB", ""})},
    {"evaluator.sandbox_max_open_files", count(s.sandbox_max_open_files, 16, 1 << 20)},
    {"timing.gpu_warmup_ms", number(t.gpu_warmup_ms, {0, true, 600000, "milliseconds", ""})},
    {"timing.gpu_rep_ms", number(t.gpu_rep_ms, {0, true, 600000, "milliseconds", ""})},
    {"timing.timer", text(t.timer)},
    {"timing.rounds", count(t.rounds, 1, 1000)},
    {"timing.systematic_rel_sd", number(t.systematic_rel_sd, {0, false, 1, "", ""})},
    {"timing.adaptive_min_calls", count(t.adaptive_min_calls, 2, 1000000)},
    {"timing.adaptive_rel_sem", number(t.adaptive_rel_sem, {0, true, 1, "", ""})},
    {"timing.reference_cache", boolean(s.reference_cache)},
    {"timing.reference_cache_dir", text(t.reference_cache_dir)},
    {"timing.cpu_warmup", count(t.cpu_warmup, 0, 100000000)},
    {"timing.cpu_runs", count(t.cpu_runs, 1, 100000000)},
    {"timing.cpu_max_seconds", delay(t.cpu_max_seconds, week_s, "0: none")},
    {"checks.exploits", boolean(t.exploit_checks)},
    {"checks.suspicious_speedup",
     number(t.suspicious_speedup, {0, false, 1000000, "", "0: never"})},
    {"checks.extra_inputs", text(s.extra_inputs)},
    {"compile.cache_dir", text(s.compile_cache_dir)},
    {"compile.workers", count(s.compile_workers, 0, 4096, "0: the cores evaluators leave")},
    {"compile.timeout_s", seconds(s.compile_timeout_s)},
    {"compile.cuda_arch", text(s.cuda_arch)},
    {"compile.precompiled_header", boolean(s.precompiled_header)},
    {"compile.memory_limit_gb",
     number(s.compile_memory_limit_gb, {0, false, 65536, "GiB", "0: none"})},
    {"nodes.port", count(s.node_port, 1, 65535)},
    {"nodes.heartbeat_s", seconds(s.heartbeat_s, 3600)},
    {"nodes.silence_s", seconds(s.node_silence_s)},
    {"nodes.keys", text(s.node_keys)},
    {"nodes.ssh", text(s.ssh)},
    {"log.level", text(s.log_level)},
    {"generate.attempts", count(s.attempts, 1, 1000)},
    {"generate.improve_when_slow", boolean(s.improve_when_slow)},
    {"generate.authors", count(s.authors, 1, 1024)},
    {"generate.run_folder_dir", text(s.run_folder_dir)},
    {"llm.provider", text(s.llm_provider)},
    {"llm.base_url", text(s.llm_base_url)},
    {"llm.model", text(s.llm_model)},
    {"llm.dsl", text(s.llm_dsl)},
    {"llm.timeout_s", seconds(s.llm_timeout_s)},
    {"llm.max_retries", count(s.llm_max_retries, 0, 100)},
    {"llm.backoff_s", delay(s.llm_backoff_s, 86400)},
    {"llm.max_backoff_s", delay(s.llm_max_backoff_s, week_s)},
    {"llm.max_tokens", count(s.llm_max_tokens, 1, 10000000)},
    {"llm.temperature", number(s.llm_temperature, {0, false, 2, "", ""})},
    {"kernel_agent.python", text(s.ka_python)},
    {"kernel_agent.workers", count(s.ka_workers, 1, 1024)},
    {"kernel_agent.max_rounds", count(s.ka_max_rounds, 1, 1000)},
    {"kernel_agent.timeout_s", seconds(s.ka_timeout_s)},
    {"kernel_agent.max_retries", count(s.ka_max_retries, 0, 100)},
    {"kernel_agent.backoff_s", delay(s.ka_backoff_s, 86400)},
    {"kernel_agent.provider", text(s.ka_provider)},
    {"kernel_agent.generate_default_test", boolean(s.ka_generate_default_test)},
    {"scheduler.shards", text(s.shards)},
    {"scheduler.shards_per_slot", number(s.shards_per_slot, {0, true, 1000, "", ""})},
    {"progress.interval_s", seconds(s.progress_interval_s)},
    {"progress.reports_interval_s", delay(s.reports_interval_s, 86400, "0: after every operator")},
  };
}

} // namespace

std::vector<std::string> setting_names() {
  settings s;
  std::vector<std::string> out;
  for (auto& [name, key] : setting_keys(s))
    out.push_back(name);
  return out;
}

caf::error load_settings(const std::string& path, settings& out) {
  settings s = out;
  auto keys = setting_keys(s);
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(errc::bad_config, path + ":" + std::to_string(e.source().begin.line) + ":"
                                          + std::to_string(e.source().begin.column) + ": "
                                          + std::string(e.description()));
  }
  auto where = [&](const toml::source_region& r) {
    return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column) + ": ";
  };
  for (auto&& [section, node] : root) {
    auto* table = node.as_table();
    if (!table)
      return make_error(errc::bad_config, where(section.source()) + "unknown key '"
                                            + std::string(section.str())
                                            + "' (settings live in sections such as [evaluator])");
    for (auto&& [key, value] : *table) {
      auto full = std::string(section.str()) + "." + std::string(key.str());
      auto it = keys.find(full);
      if (it == keys.end())
        return make_error(errc::bad_config, where(key.source()) + "unknown key '" + full + "'");
      if (!it->second.set(value))
        return make_error(errc::bad_config, where(key.source()) + "key '" + full + "' must be "
                                              + it->second.expected + ", not "
                                              + type_name_of(value));
      if (it->second.check)
        if (auto why = it->second.check(); !why.empty())
          return make_error(errc::bad_config, where(key.source()) + full + " " + why);
    }
  }
  out = s;
  return {};
}

std::string build_python() {
  return BB_PYTHON;
}

std::string beside_program(const std::string& name) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

std::string default_runner_path() {
  return beside_program("bbrunner");
}

std::string project_home() {
  if (const char* home = std::getenv("BBCLUSTER_HOME"); home && *home)
    return home;
  const char* user = std::getenv("HOME");
  return std::string(user && *user ? user : "/tmp") + "/.cache/bbcluster";
}

uint64_t runner_memory_limit(double gb, size_t slots) {
  if (gb > 0)
    return static_cast<uint64_t>(gb * double(1ull << 30));
  auto pages = ::sysconf(_SC_PHYS_PAGES);
  auto page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0)
    return 0;
  return static_cast<uint64_t>(0.75 * double(pages) * double(page) / double(std::max<size_t>(1, slots)));
}

size_t count_gpus() {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev", ec)) {
    auto name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0
        && name.find_first_not_of("0123456789", 6) == std::string::npos)
      ++n;
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && n > 0) {
    std::string v = visible;
    size_t listed = v.empty() ? 0 : 1 + static_cast<size_t>(std::count(v.begin(), v.end(), ','));
    n = std::min(n, listed);
  }
  return n;
}

runner_options runner_options_of(const settings& s) {
  auto opts = s.timing;
  opts.reference_cache = s.reference_cache;
  if (!s.reference_cache)
    opts.reference_cache_dir.clear();
  else if (opts.reference_cache_dir.empty())
    opts.reference_cache_dir = reference_cache::default_dir();
  return opts;
}

bool extra_inputs_for(const settings& s, const std::string& backend) {
  if (s.extra_inputs != "auto")
    return s.extra_inputs == "on";
  return backend == "llm" || backend == "llm-relay" || backend == "kernel_agent";
}

double shards_per_slot(const settings& s) {
  return s.shards == "off" ? 0.0 : s.shards_per_slot;
}

double evaluate_timeout_s(const settings& s) {
  return s.start_timeout_s + 2 * s.job_timeout_s + 30;
}

caf::error validate(const settings& s) {
  auto bad = [](const std::string& what) { return make_error(errc::bad_config, what); };
  // The ranges of a file's keys, for values that came from elsewhere (the command line).
  settings copy = s;
  for (auto& [name, key] : setting_keys(copy))
    if (key.check)
      if (auto why = key.check(); !why.empty())
        return bad(name + " " + why);
  if (s.device != "auto" && s.device != "cpu" && s.device != "cuda")
    return bad("evaluator.device must be auto, cpu or cuda, not '" + s.device + "'");
  if (s.node_silence_s <= s.heartbeat_s)
    return bad("nodes.silence_s must be above nodes.heartbeat_s");
  if (s.timing.timer != "do_bench" && s.timing.timer != "adaptive")
    return bad("timing.timer must be do_bench or adaptive, not '" + s.timing.timer + "'");
  if (s.extra_inputs != "auto" && s.extra_inputs != "on" && s.extra_inputs != "off")
    return bad("checks.extra_inputs must be auto, on or off, not '" + s.extra_inputs + "'");
  if (s.llm_provider != "openai" && s.llm_provider != "anthropic")
    return bad("llm.provider must be openai or anthropic, not '" + s.llm_provider + "'");
  if (s.llm_dsl != "triton" && s.llm_dsl != "pytorch" && s.llm_dsl != "cuda"
      && s.llm_dsl != "cutedsl" && s.llm_dsl != "helion")
    return bad("llm.dsl must be triton, pytorch, cuda, cutedsl or helion, not '" + s.llm_dsl + "'");
  if (!s.ka_provider.empty() && s.ka_provider != "relay" && s.ka_provider != "openai"
      && s.ka_provider != "anthropic")
    return bad("kernel_agent.provider must be relay, openai, anthropic or \"\", not '"
               + s.ka_provider + "'");
  if (s.sandbox != "auto" && s.sandbox != "required" && s.sandbox != "off")
    return bad("evaluator.sandbox must be auto, required or off, not '" + s.sandbox + "'");
  if (s.shards != "auto" && s.shards != "off")
    return bad("scheduler.shards must be auto or off, not '" + s.shards + "'");
  static const char* levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (auto l : levels)
    if (s.log_level == l)
      return {};
  return bad("log.level must be one of trace, debug, info, warn, error, critical, off");
}

} // namespace bb
