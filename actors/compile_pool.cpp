#include "actors/compile_pool.hpp"

#include <thread>

#include <spdlog/spdlog.h>

#include "messages/errors.hpp"

namespace bb {

caf::error validate(const compile_pool_config& cfg) {
  if (cfg.workers < 1)
    return make_error(errc::bad_config, "compile pool: needs at least one worker");
  if (cfg.build.cache_dir.empty())
    return make_error(errc::bad_config, "compile pool: no cache folder");
  if (cfg.build.tools.cxx.empty())
    return make_error(errc::bad_config, "compile pool: no C++ compiler");
  return {};
}

size_t default_compile_workers(size_t evaluators) {
  auto cores = static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()));
  return cores > evaluators ? cores - evaluators : 1;
}

namespace {

// One compiler at a time, blocking: spawned detached.
compile_pool_actor::behavior_type compile_worker(compile_pool_actor::pointer, compile_settings s) {
  return {
    [s](atom::compile, const artefact& a) { return build_kernel(a, s); },
  };
}

void answer(compile_pool_pointer self, const std::string& key, const compile_outcome& out) {
  auto it = self->state.waiting.find(key);
  if (it == self->state.waiting.end())
    return;
  for (auto& rp : it->second)
    rp.deliver(out);
  self->state.waiting.erase(it);
}

void dispatch(compile_pool_pointer self) {
  auto& st = self->state;
  while (!st.idle.empty() && !st.queue.empty()) {
    auto worker = st.idle.back();
    st.idle.pop_back();
    auto job = std::move(st.queue.front());
    st.queue.pop_front();
    auto timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(st.cfg.build.timeout_s + 60));
    self->request(worker, timeout, atom::compile_v, job.kernel)
      .then(
        [=](compile_outcome& out) mutable {
          auto& st = self->state;
          if (out.status == outcome::compile_failed)
            ++st.failed;
          else if (out.cached)
            ++st.cached;
          else if (out.status == outcome::ok)
            ++st.built;
          spdlog::info("compile_pool: {} {} ({}{:.1f} s)", job.kernel.path, to_string(out.status),
                       out.cached ? "cached, " : "", out.seconds);
          answer(self, job.key, out);
          st.idle.push_back(worker);
          dispatch(self);
        },
        [=](caf::error& err) mutable {
          compile_outcome out;
          out.status = outcome::compile_failed;
          out.message = "compiler worker failed: " + describe(err);
          answer(self, job.key, out);
          // A worker whose request failed is not reused; replace it.
          self->state.idle.push_back(
            self->home_system().spawn<caf::detached>(compile_worker, self->state.cfg.build));
          dispatch(self);
        });
  }
}

} // namespace

compile_pool_actor::behavior_type compile_pool(compile_pool_pointer self, compile_pool_config cfg) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return compile_pool_actor::behavior_type::make_empty_behavior();
  }
  for (size_t i = 0; i < cfg.workers; ++i) {
    auto worker = self->home_system().spawn<caf::detached>(compile_worker, cfg.build);
    self->link_to(worker);
    self->state.idle.push_back(worker);
  }
  self->state.cfg = std::move(cfg);
  return {
    [=](atom::compile, artefact& a) -> caf::typed_response_promise<compile_outcome> {
      auto& st = self->state;
      auto rp = self->make_response_promise<compile_outcome>();
      // An artefact is its kind, entry and source (hash); one without a hash builds on its own.
      auto key = a.hash.empty() ? "#" + std::to_string(++st.requests) : std::string(to_string(a.kind)) + ":" + a.entry + ":" + a.hash;
      auto& waiters = st.waiting[key];
      waiters.push_back(rp);
      if (waiters.size() == 1) {
        st.queue.push_back({std::move(a), key});
        dispatch(self);
      }
      return rp;
    },
  };
}

} // namespace bb
