#include "nodes/local_node.hpp"

#include <algorithm>
#include <thread>

#include <caf/scoped_actor.hpp>

#include "actors/compile_pool.hpp"
#include "actors/evaluator.hpp"
#include "artefacts/compiler.hpp"

namespace bb {

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
  pcfg.workers = s.compile_workers > 0 ? static_cast<size_t>(s.compile_workers) : default_compile_workers(slots);
  node.compiler = sys.spawn(compile_pool, pcfg);
  evaluator_config ecfg;
  ecfg.runner = s.runner.empty() ? default_runner_path() : s.runner;
  ecfg.device = cuda ? "cuda" : "cpu";
  ecfg.node = name;
  ecfg.log_dir = log_dir + "/runner_logs";
  ecfg.job_timeout_s = s.job_timeout_s;
  ecfg.call_timeout_s = s.call_timeout_s;
  ecfg.start_timeout_s = s.start_timeout_s;
  ecfg.options = runner_options_of(s);
  // CPU slots share the node's cores.
  if (!cuda && ecfg.options.cpu_threads == 0)
    ecfg.options.cpu_threads = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency() / slots));
  ecfg.memory_limit_bytes = cuda ? 0 : runner_memory_limit(s.memory_limit_gb, slots);
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
