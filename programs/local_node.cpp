#include "programs/local_node.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <caf/scoped_actor.hpp>

#include "actors/compile_pool.hpp"
#include "actors/evaluator.hpp"
#include "artefacts/compiler.hpp"

namespace bb {

std::string jit_cache_dir() {
  std::error_code ec;
  auto dir = std::filesystem::absolute(project_home() + "/jit", ec);
  return ec ? project_home() + "/jit" : dir.lexically_normal().string();
}

sandbox_policy node_sandbox(const settings& s, const std::string& run_folder,
                            const std::string& cache_dir, const std::string& runner) {
  namespace fs = std::filesystem;
  auto absolute = [](const std::string& p) {
    std::error_code ec;
    auto a = fs::absolute(p, ec);
    return ec ? p : a.lexically_normal().string();
  };
  sandbox_policy p;
  from_string(s.sandbox, p.mode);
  p.hidden = default_hidden_folders();
  p.hidden.push_back(absolute(run_folder));
  p.hidden.push_back(absolute(cache_dir));
  if (!s.node_keys.empty())
    p.hidden.push_back(absolute(s.node_keys));
  p.read_only = python_environment_folders(build_python());
  // What PYTHONPATH adds is part of the Python environment a kernel runs in: shown read-only.
  if (const char* extra = std::getenv("PYTHONPATH")) {
    std::string all = extra;
    for (size_t start = 0; start <= all.size();) {
      auto end = all.find(':', start);
      auto entry = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!entry.empty())
        p.read_only.push_back(absolute(entry));
      if (end == std::string::npos)
        break;
      start = end + 1;
    }
  }
  p.read_only.push_back(fs::path(absolute(runner)).parent_path().string());
  // Built kernels appear there after runners start: the folder must exist to be shown.
  std::error_code made;
  fs::create_directories(absolute(cache_dir) + "/objects", made);
  p.read_only.push_back(absolute(cache_dir) + "/objects");
  if (s.jit_cache) {
    fs::create_directories(jit_cache_dir(), made);
    p.read_only.push_back(absolute(jit_cache_dir()));
  }
  p.tmp_bytes = static_cast<uint64_t>(s.sandbox_tmp_mb) << 20;
  p.limits.max_processes = static_cast<uint64_t>(s.sandbox_max_processes);
  p.limits.max_file_bytes = static_cast<uint64_t>(s.sandbox_max_file_mb) << 20;
  p.limits.max_open_files = static_cast<uint64_t>(s.sandbox_max_open_files);
  return p;
}

std::string sandbox_refusal(const settings& s) {
  sandbox_mode mode = sandbox_mode::automatic;
  from_string(s.sandbox, mode);
  return decide_sandbox(mode).refusal;
}

local_node spawn_local_node(caf::actor_system& sys, const settings& s, const std::string& name,
                            const std::string& log_dir) {
  auto gpus = count_gpus();
  bool cuda = s.device == "cuda" || (s.device == "auto" && gpus > 0);
  auto slots = s.devices > 0 ? static_cast<size_t>(s.devices) : std::max<size_t>(1, cuda ? gpus : 1);
  local_node node;
  compile_pool_config pcfg;
  pcfg.build.tools = default_toolchain();
  pcfg.build.tools.cuda_arch = s.cuda_arch;
  pcfg.build.tools.use_pch = s.precompiled_header;
  pcfg.build.cache_dir = s.compile_cache_dir.empty() ? default_cache_dir() : s.compile_cache_dir;
  pcfg.build.log_dir = log_dir + "/compile_logs";
  pcfg.build.timeout_s = s.compile_timeout_s;
  pcfg.build.has_cuda = cuda;
  auto runner = s.runner.empty() ? default_runner_path() : s.runner;
  auto sandbox = node_sandbox(s, log_dir, pcfg.build.cache_dir, runner);
  pcfg.build.sandbox = sandbox;
  pcfg.build.sandbox.limits.max_data_bytes = static_cast<uint64_t>(s.compile_memory_limit_gb * double(1ull << 30));
  pcfg.workers = s.compile_workers > 0 ? static_cast<size_t>(s.compile_workers) : default_compile_workers(slots);
  node.compiler = sys.spawn(compile_pool, pcfg);
  evaluator_config ecfg;
  ecfg.runner = runner;
  ecfg.device = cuda ? "cuda" : "cpu";
  ecfg.node = name;
  ecfg.log_dir = log_dir + "/runner_logs";
  ecfg.job_timeout_s = s.job_timeout_s;
  ecfg.call_timeout_s = s.call_timeout_s;
  ecfg.start_timeout_s = s.start_timeout_s;
  ecfg.options = runner_options_of(s);
  // A CPU's timings move with the machine's load: its reference times are kept only in a
  // cache folder named on purpose (timing.reference_cache_dir).
  if (!cuda && s.timing.reference_cache_dir.empty())
    ecfg.options.reference_cache_dir.clear();
  // CPU slots share the node's cores.
  if (!cuda && ecfg.options.cpu_threads == 0)
    ecfg.options.cpu_threads = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency() / slots));
  ecfg.memory_limit_bytes = cuda ? 0 : runner_memory_limit(s.memory_limit_gb, slots);
  ecfg.sandbox = sandbox;
  if (s.jit_cache) {
    ecfg.jit_cache_dir = jit_cache_dir();
    ecfg.jit_cache_max_bytes = static_cast<uint64_t>(s.jit_cache_max_mb) << 20;
  }
  node.evaluators = spawn_evaluators(sys, ecfg, slots);
  node.info.name = name;
  node.info.slots = static_cast<uint32_t>(slots);
  node.info.device = ecfg.device;
  node.info.torch_version = pcfg.build.tools.torch_version;
  node.info.build = "bbcluster " BB_VERSION;
  return node;
}

void stop_local_node(caf::actor_system& sys, local_node& node) {
  caf::scoped_actor self{sys};
  for (auto& e : node.evaluators)
    self->send_exit(e, caf::exit_reason::user_shutdown);
  if (node.compiler)
    self->send_exit(node.compiler, caf::exit_reason::user_shutdown);
}

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0)
    return true;
  if (endpoint.rfind("tcp://", 0) != 0)
    return false;
  auto host = endpoint.substr(6, endpoint.rfind(':') - 6);
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "[::1]";
}

} // namespace bb
