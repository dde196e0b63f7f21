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
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

} // namespace

caf::error load_settings(const std::string& path, settings& out) {
  settings s = out;
  struct key_info {
    setter set;
    const char* expected;
  };
  std::map<std::string, key_info> keys = {
    {"run.log_dir", {bind(s.log_dir), "a string"}},
    {"run.p", {bind(s.p), "a number"}},
    {"evaluator.devices", {bind(s.devices), "an integer"}},
    {"evaluator.device", {bind(s.device), "a string"}},
    {"evaluator.runner", {bind(s.runner), "a string"}},
    {"evaluator.job_timeout_s", {bind(s.job_timeout_s), "a number"}},
    {"evaluator.start_timeout_s", {bind(s.start_timeout_s), "a number"}},
    {"evaluator.call_timeout_s", {bind(s.call_timeout_s), "a number"}},
    {"evaluator.memory_limit_gb", {bind(s.memory_limit_gb), "a number"}},
    {"timing.gpu_warmup_ms", {bind(s.timing.gpu_warmup_ms), "a number"}},
    {"timing.gpu_rep_ms", {bind(s.timing.gpu_rep_ms), "a number"}},
    {"timing.timer", {bind(s.timing.timer), "a string"}},
    {"timing.rounds", {bind(s.timing.rounds), "an integer"}},
    {"timing.systematic_rel_sd", {bind(s.timing.systematic_rel_sd), "a number"}},
    {"evaluator.cpu_threads", {bind(s.timing.cpu_threads), "an integer"}},
    {"timing.adaptive_min_calls", {bind(s.timing.adaptive_min_calls), "an integer"}},
    {"timing.adaptive_rel_sem", {bind(s.timing.adaptive_rel_sem), "a number"}},
    {"timing.reference_cache", {bind(s.reference_cache), "a boolean"}},
    {"timing.reference_cache_dir", {bind(s.timing.reference_cache_dir), "a string"}},
    {"evaluator.max_attempts", {bind(s.max_attempts), "an integer"}},
    {"timing.cpu_warmup", {bind(s.timing.cpu_warmup), "an integer"}},
    {"timing.cpu_runs", {bind(s.timing.cpu_runs), "an integer"}},
    {"timing.cpu_max_seconds", {bind(s.timing.cpu_max_seconds), "a number"}},
    {"checks.exploits", {bind(s.timing.exploit_checks), "a boolean"}},
    {"checks.suspicious_speedup", {bind(s.timing.suspicious_speedup), "a number"}},
    {"checks.extra_inputs", {bind(s.extra_inputs), "a string"}},
    {"compile.cache_dir", {bind(s.compile_cache_dir), "a string"}},
    {"nodes.port", {bind(s.node_port), "an integer"}},
    {"nodes.heartbeat_s", {bind(s.heartbeat_s), "a number"}},
    {"nodes.silence_s", {bind(s.node_silence_s), "a number"}},
    {"nodes.keys", {bind(s.node_keys), "a string"}},
    {"nodes.ssh", {bind(s.ssh), "a string"}},
    {"compile.workers", {bind(s.compile_workers), "an integer"}},
    {"compile.timeout_s", {bind(s.compile_timeout_s), "a number"}},
    {"compile.cuda_arch", {bind(s.cuda_arch), "a string"}},
    {"compile.precompiled_header", {bind(s.precompiled_header), "a boolean"}},
    {"log.level", {bind(s.log_level), "a string"}},
    {"generate.attempts", {bind(s.attempts), "an integer"}},
    {"generate.improve_when_slow", {bind(s.improve_when_slow), "a boolean"}},
    {"generate.authors", {bind(s.authors), "an integer"}},
    {"generate.run_folder_dir", {bind(s.run_folder_dir), "a string"}},
    {"llm.provider", {bind(s.llm_provider), "a string"}},
    {"llm.base_url", {bind(s.llm_base_url), "a string"}},
    {"llm.model", {bind(s.llm_model), "a string"}},
    {"llm.dsl", {bind(s.llm_dsl), "a string"}},
    {"llm.timeout_s", {bind(s.llm_timeout_s), "a number"}},
    {"llm.max_retries", {bind(s.llm_max_retries), "an integer"}},
    {"llm.backoff_s", {bind(s.llm_backoff_s), "a number"}},
    {"llm.max_backoff_s", {bind(s.llm_max_backoff_s), "a number"}},
    {"llm.max_tokens", {bind(s.llm_max_tokens), "an integer"}},
    {"llm.temperature", {bind(s.llm_temperature), "a number"}},
    {"kernel_agent.python", {bind(s.ka_python), "a string"}},
    {"kernel_agent.workers", {bind(s.ka_workers), "an integer"}},
    {"kernel_agent.max_rounds", {bind(s.ka_max_rounds), "an integer"}},
    {"kernel_agent.timeout_s", {bind(s.ka_timeout_s), "a number"}},
    {"kernel_agent.max_retries", {bind(s.ka_max_retries), "an integer"}},
    {"kernel_agent.backoff_s", {bind(s.ka_backoff_s), "a number"}},
    {"kernel_agent.provider", {bind(s.ka_provider), "a string"}},
    {"kernel_agent.generate_default_test", {bind(s.ka_generate_default_test), "a boolean"}},
    {"evaluator.sandbox", {bind(s.sandbox), "a string"}},
    {"evaluator.sandbox_tmp_mb", {bind(s.sandbox_tmp_mb), "an integer"}},
    {"evaluator.sandbox_max_processes", {bind(s.sandbox_max_processes), "an integer"}},
    {"evaluator.sandbox_max_file_mb", {bind(s.sandbox_max_file_mb), "an integer"}},
    {"evaluator.sandbox_max_open_files", {bind(s.sandbox_max_open_files), "an integer"}},
    {"compile.memory_limit_gb", {bind(s.compile_memory_limit_gb), "a number"}},
    {"run.grace_s", {bind(s.grace_s), "a number"}},
    {"scheduler.shards", {bind(s.shards), "a string"}},
    {"scheduler.shards_per_slot", {bind(s.shards_per_slot), "a number"}},
    {"progress.interval_s", {bind(s.progress_interval_s), "a number"}},
  };
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(errc::bad_config, path + ":" + std::to_string(e.source().begin.line) + ": "
                                          + std::string(e.description()));
  }
  for (auto&& [section, node] : root) {
    auto where = [&](const toml::node& n) {
      return path + ":" + std::to_string(n.source().begin.line) + ": ";
    };
    auto* table = node.as_table();
    if (!table)
      return make_error(errc::bad_config, where(node) + "unknown key '" + std::string(section.str())
                                            + "' (settings live in sections such as [evaluator])");
    for (auto&& [key, value] : *table) {
      auto full = std::string(section.str()) + "." + std::string(key.str());
      auto it = keys.find(full);
      if (it == keys.end())
        return make_error(errc::bad_config, where(value) + "unknown key '" + full + "'");
      if (!it->second.set(value))
        return make_error(errc::bad_config, where(value) + "key '" + full + "' must be "
                                              + it->second.expected + ", not "
                                              + type_name_of(value));
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
  if (s.devices < 0)
    return bad("evaluator.devices must be >= 0");
  if (s.device != "auto" && s.device != "cpu" && s.device != "cuda")
    return bad("evaluator.device must be auto, cpu or cuda, not '" + s.device + "'");
  if (s.job_timeout_s <= 0 || s.start_timeout_s <= 0 || s.call_timeout_s <= 0)
    return bad("evaluator timeouts must be positive");
  if (s.memory_limit_gb < 0 || s.timing.gpu_warmup_ms <= 0 || s.timing.gpu_rep_ms <= 0)
    return bad("evaluator.memory_limit_gb must be >= 0 and the GPU timing budgets positive");
  if (s.max_attempts < 1)
    return bad("evaluator.max_attempts must be >= 1");
  if (s.timing.cpu_threads < 0)
    return bad("evaluator.cpu_threads must be >= 0");
  if (s.timing.cpu_warmup < 0 || s.timing.cpu_runs < 1)
    return bad("timing.cpu_warmup must be >= 0 and timing.cpu_runs >= 1");
  if (s.compile_workers < 0 || s.compile_timeout_s <= 0)
    return bad("compile.workers must be >= 0 and compile.timeout_s positive");
  if (s.node_port < 1 || s.node_port > 65535 || s.heartbeat_s <= 0 || s.node_silence_s <= s.heartbeat_s)
    return bad("nodes.port must be 1..65535, nodes.heartbeat_s positive and nodes.silence_s above it");
  if (s.timing.cpu_max_seconds < 0)
    return bad("timing.cpu_max_seconds must be >= 0");
  if (s.timing.timer != "do_bench" && s.timing.timer != "adaptive")
    return bad("timing.timer must be do_bench or adaptive, not '" + s.timing.timer + "'");
  if (s.timing.rounds < 1 || s.timing.adaptive_min_calls < 2 || s.timing.adaptive_rel_sem <= 0
      || s.timing.systematic_rel_sd < 0)
    return bad("timing.rounds must be >= 1, timing.adaptive_min_calls >= 2, "
               "timing.adaptive_rel_sem positive and timing.systematic_rel_sd >= 0");
  if (!std::isfinite(s.timing.suspicious_speedup) || s.timing.suspicious_speedup < 0)
    return bad("checks.suspicious_speedup must be a finite number >= 0 (0: never), not "
               + number_text(s.timing.suspicious_speedup));
  if (s.extra_inputs != "auto" && s.extra_inputs != "on" && s.extra_inputs != "off")
    return bad("checks.extra_inputs must be auto, on or off, not '" + s.extra_inputs + "'");
  if (s.attempts < 1 || s.authors < 1)
    return bad("generate.attempts (--llm-attempts) and generate.authors must be >= 1");
  if (s.llm_provider != "openai" && s.llm_provider != "anthropic")
    return bad("llm.provider must be openai or anthropic, not '" + s.llm_provider + "'");
  if (s.llm_dsl != "triton" && s.llm_dsl != "pytorch" && s.llm_dsl != "cuda"
      && s.llm_dsl != "cutedsl" && s.llm_dsl != "helion")
    return bad("llm.dsl must be triton, pytorch, cuda, cutedsl or helion, not '" + s.llm_dsl + "'");
  if (s.llm_timeout_s <= 0 || s.llm_max_retries < 0 || s.llm_backoff_s < 0 || s.llm_max_tokens < 1)
    return bad("llm.timeout_s and llm.max_tokens must be positive, llm.max_retries and "
               "llm.backoff_s >= 0");
  if (s.ka_workers < 1 || s.ka_max_rounds < 1 || s.ka_timeout_s <= 0 || s.ka_max_retries < 0
      || s.ka_backoff_s < 0)
    return bad("kernel_agent.workers, max_rounds and timeout_s must be positive, max_retries "
               "and backoff_s >= 0");
  if (!s.ka_provider.empty() && s.ka_provider != "relay" && s.ka_provider != "openai"
      && s.ka_provider != "anthropic")
    return bad("kernel_agent.provider must be relay, openai, anthropic or \"\", not '"
               + s.ka_provider + "'");
  if (s.sandbox != "auto" && s.sandbox != "required" && s.sandbox != "off")
    return bad("evaluator.sandbox must be auto, required or off, not '" + s.sandbox + "'");
  if (s.sandbox_tmp_mb < 1 || s.sandbox_max_processes < 1 || s.sandbox_max_file_mb < 1
      || s.sandbox_max_open_files < 16 || s.compile_memory_limit_gb < 0)
    return bad("evaluator.sandbox_tmp_mb, sandbox_max_processes and sandbox_max_file_mb must be "
               ">= 1, sandbox_max_open_files >= 16 and compile.memory_limit_gb >= 0");
  if (s.shards != "auto" && s.shards != "off")
    return bad("scheduler.shards must be auto or off, not '" + s.shards + "'");
  if (s.shards_per_slot <= 0)
    return bad("scheduler.shards_per_slot must be positive");
  if (s.grace_s < 0 || s.progress_interval_s <= 0)
    return bad("run.grace_s must be >= 0 and progress.interval_s positive");
  static const char* levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (auto l : levels)
    if (s.log_level == l)
      return {};
  return bad("log.level must be one of trace, debug, info, warn, error, critical, off");
}

} // namespace bb
