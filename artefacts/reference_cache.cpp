#include "artefacts/reference_cache.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "artefacts/sha256.hpp"

namespace bb {

namespace fs = std::filesystem;

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(reference_entry, BB_FIELDS_REFERENCE_ENTRY)

std::string reference_entry_json(const reference_entry& e) {
  return nlohmann::json(e).dump();
}

reference_entry parse_reference_entry(const std::string& text) {
  return nlohmann::json::parse(text).get<reference_entry>();
}

namespace {

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

std::string reference_cache::key(const std::string& op_name, const std::string& call_text,
                                 const provenance& where, const runner_options& opts) {
  nlohmann::json k = {{"op", op_name},
                      {"input", call_text},
                      {"device", where.device},
                      {"driver", where.driver},
                      {"torch", where.torch_version},
                      {"timer", opts.timer},
                      {"rounds", opts.rounds}};
  if (opts.device == "cuda") {
    k["gpu_warmup_ms"] = opts.gpu_warmup_ms;
    k["gpu_rep_ms"] = opts.gpu_rep_ms;
    k["flush_bytes"] = opts.flush_bytes;
  } else {
    k["node"] = where.node;
    k["cpu_warmup"] = opts.cpu_warmup;
    k["cpu_runs"] = opts.cpu_runs;
    k["cpu_max_seconds"] = opts.cpu_max_seconds;
  }
  if (opts.timer == "adaptive") {
    k["adaptive_min_calls"] = opts.adaptive_min_calls;
    k["adaptive_rel_sem"] = opts.adaptive_rel_sem;
  }
  // A reference timed on fresh inputs every call is another measurement; keys without the
  // checks stay as they were, so earlier caches keep serving them.
  if (opts.exploit_checks)
    k["fresh_inputs"] = true;
  return k.dump();
}

std::string reference_cache::path_of(const std::string& key) const {
  auto h = sha256_hex(key);
  return (fs::path(dir_) / h.substr(0, 2) / (h + ".json")).string();
}

std::optional<cached_reference> reference_cache::find(const std::string& key) const {
  if (!enabled())
    return std::nullopt;
  std::error_code ec;
  if (!fs::exists(path_of(key), ec))
    return std::nullopt;
  try {
    auto e = parse_reference_entry(read_all(path_of(key)));
    if (e.key != key || e.mean_ms <= 0)
      return std::nullopt;
    cached_reference c;
    c.mean_ms = e.mean_ms;
    c.round_means_ms = e.round_means_ms;
    return c;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool reference_cache::store(const std::string& key, const cached_reference& timing) const {
  if (!enabled())
    return false;
  auto path = fs::path(path_of(key));
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  auto tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << reference_entry_json({key, timing.mean_ms, timing.round_means_ms});
    if (!out.flush())
      return false;
  }
  fs::rename(tmp, path, ec);
  return !ec;
}

std::string reference_cache::default_dir() {
  if (const char* c = std::getenv("BBCLUSTER_CACHE"); c && *c)
    return (fs::path(c) / "reference_times").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home ? home : "/tmp") / ".cache" / "bbcluster" / "reference_times").string();
}

known_call_times reference_cache::call_times(const std::string& device) const {
  known_call_times out;
  if (!enabled())
    return out;
  std::error_code ec;
  for (auto& entry : fs::recursive_directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json")
      continue;
    try {
      auto e = parse_reference_entry(read_all(entry.path()));
      auto key = nlohmann::json::parse(e.key);
      // Only CUDA keys carry do_bench's budgets.
      if (key.contains("gpu_warmup_ms") != (device == "cuda"))
        continue;
      out[{key.at("op").get<std::string>(), key.at("input").get<std::string>()}] = e.mean_ms;
    } catch (const std::exception&) {
      continue; // a torn or foreign file says nothing
    }
  }
  return out;
}

void attach_cached_references(eval_job& job, const reference_cache& cache, const provenance& where,
                              const runner_options& opts) {
  job.cached_references.clear();
  if (!cache.enabled())
    return;
  for (size_t i = 0; i < job.performance_inputs.size(); ++i) {
    if (auto hit = cache.find(reference_cache::key(job.op_name, job.performance_inputs[i], where, opts))) {
      hit->index = static_cast<uint32_t>(i);
      job.cached_references.push_back(*hit);
    }
  }
}

void keep_measured_references(eval_result& result, const eval_job& job, const reference_cache& cache,
                              const runner_options& opts) {
  for (size_t i = 0; i < result.performance.size() && i < job.performance_inputs.size(); ++i) {
    auto& p = result.performance[i];
    // The runner leaves round means only where the cache is to keep them (timed in full, or a
    // calibration that found the cached figure stale).
    if (p.successfully_ran && !p.reference_round_means_ms.empty()) {
      cached_reference c;
      c.index = static_cast<uint32_t>(i);
      c.mean_ms = p.reference_time_ms;
      c.round_means_ms = p.reference_round_means_ms;
      cache.store(reference_cache::key(job.op_name, job.performance_inputs[i], result.where, opts), c);
    }
    p.reference_round_means_ms.clear();
  }
}

} // namespace bb
