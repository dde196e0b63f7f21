#include "actors/authors.hpp"

#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

namespace bb {

namespace {

void sleep_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

} // namespace

author_actor::behavior_type llm_author(author_actor::stateful_pointer<llm_author_state>,
                                       llm_config cfg) {
  return {
    [cfg](atom::write, const author_request& req) -> author_reply {
      spdlog::debug("llm_author: {} v{}: asking {}", req.op.op_name, req.version, cfg.model);
      auto post = [](const llm_request& r, double timeout_s) {
        return http_post_json(r.url, r.headers, r.body, timeout_s);
      };
      return ask_llm(cfg, req, post, sleep_for);
    },
  };
}

author_actor::behavior_type
kernel_agent_author(author_actor::stateful_pointer<kernel_agent_author_state>,
                    kernel_agent_config cfg) {
  return {
    [cfg](atom::write, const author_request& req) -> author_reply {
      spdlog::info("kernel_agent_author: {} v{}: agent started ({} workers, {} rounds{})",
                   req.op.op_name, req.version, cfg.workers, cfg.max_rounds,
                   cfg.model.empty() ? "" : ", model " + cfg.model);
      return run_kernel_agent(cfg, req, sleep_for);
    },
  };
}

} // namespace bb
