#include "actors/slot_pool.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "messages/errors.hpp"
#include "results/results.hpp"

namespace bb {

std::string next_client(const std::map<std::string, size_t>& queued, const std::string& last) {
  auto waiting = [](const std::pair<const std::string, size_t>& q) { return q.second > 0; };
  auto after = std::find_if(queued.upper_bound(last), queued.end(), waiting);
  if (after != queued.end())
    return after->first;
  auto first = std::find_if(queued.begin(), queued.end(), waiting);
  return first == queued.end() ? "" : first->first;
}

namespace {

void dispatch(slot_pool_pointer self);

// A slot that failed its request or went down: gone from the pool.
void lose_slot(slot_pool_pointer self, const caf::actor_addr& who, const std::string& why) {
  auto& st = self->state;
  auto idle = std::find_if(st.idle.begin(), st.idle.end(),
                           [&](const evaluator_actor& e) { return e.address() == who; });
  bool known = idle != st.idle.end() || st.busy.count(who) > 0;
  if (!known)
    return;
  if (idle != st.idle.end())
    st.idle.erase(idle);
  if (auto job = st.busy.find(who); job != st.busy.end()) {
    // Its job ends now, as an infrastructure failure (its coordinator retries it elsewhere).
    job->second.promise.deliver(failed_result(job->second.job, outcome::infra_error, "evaluator lost: " + why));
    st.busy.erase(job);
  }
  st.busy_client.erase(who);
  --st.slots;
  spdlog::error("slot_pool: a slot is lost ({}); {} remain", why, st.slots);
  if (st.slots > 0)
    return;
  if (st.wait_for_slots) {
    spdlog::warn("slot_pool: no slot left; jobs wait for a node to come back (clients may cancel)");
    return;
  }
  // No slot left: every queued job ends as an infrastructure failure.
  for (auto& [client, queue] : st.queues)
    for (auto& e : queue)
      e.promise.deliver(failed_result(e.job, outcome::infra_error, "no evaluator left: " + why));
  st.queues.clear();
}

void dispatch(slot_pool_pointer self) {
  auto& st = self->state;
  while (!st.idle.empty()) {
    std::map<std::string, size_t> queued;
    for (auto& [client, queue] : st.queues)
      queued[client] = queue.size();
    auto client = next_client(queued, st.last_client);
    if (client.empty())
      return;
    st.last_client = client;
    auto& queue = st.queues[client];
    auto e = std::move(queue.front());
    queue.pop_front();
    if (queue.empty())
      st.queues.erase(client);
    auto worker = st.idle.back();
    st.idle.pop_back();
    auto job = e.job;
    st.busy[worker.address()] = std::move(e);
    st.busy_client[worker.address()] = client;
    ++st.dispatched;
    self->request(worker, st.evaluate_timeout, atom::evaluate_v, job)
      .then(
        [=](eval_result& r) {
          auto& st = self->state;
          auto held = st.busy.find(worker.address());
          if (held == st.busy.end())
            return; // lost meanwhile: its job was answered then
          held->second.promise.deliver(std::move(r));
          st.busy.erase(held);
          st.busy_client.erase(worker.address());
          st.idle.push_back(worker);
          dispatch(self);
        },
        [=](caf::error& err) {
          lose_slot(self, worker.address(), describe(err));
          dispatch(self);
        });
  }
}

} // namespace

slot_pool_actor::behavior_type slot_pool(slot_pool_pointer self, std::vector<evaluator_actor> evaluators,
                                         caf::timespan evaluate_timeout, bool wait_for_slots) {
  auto& st = self->state;
  st.evaluate_timeout = evaluate_timeout;
  st.wait_for_slots = wait_for_slots;
  st.slots = evaluators.size();
  for (auto& e : evaluators)
    self->monitor(e);
  st.idle = std::move(evaluators);
  self->set_down_handler([=](caf::down_msg& dm) {
    lose_slot(self, dm.source, "down: " + describe(dm.reason));
    dispatch(self);
  });
  return {
    [=](atom::evaluate, std::string& client, std::string& request,
        eval_job& job) -> caf::typed_response_promise<eval_result> {
      auto& st = self->state;
      auto promise = self->make_response_promise<eval_result>();
      if (st.slots == 0 && !st.wait_for_slots) {
        promise.deliver(failed_result(job, outcome::infra_error, "no evaluator left"));
        return promise;
      }
      if (st.cancelled_set.count({client, request}) > 0) {
        promise.deliver(failed_result(job, outcome::infra_error, "the request was cancelled"));
        return promise;
      }
      st.queues[client].push_back({request, std::move(job), promise});
      dispatch(self);
      return promise;
    },
    [=](atom::cancel, const std::string& client, const std::string& request) {
      auto& st = self->state;
      if (st.cancelled_set.insert({client, request}).second) {
        st.cancelled.emplace_back(client, request);
        if (st.cancelled.size() > slot_pool_state::max_cancelled) {
          st.cancelled_set.erase(st.cancelled.front());
          st.cancelled.pop_front();
        }
      }
      auto q = st.queues.find(client);
      if (q == st.queues.end())
        return;
      auto& queue = q->second;
      for (auto& e : queue)
        if (e.request == request)
          e.promise.deliver(failed_result(e.job, outcome::infra_error, "the request was cancelled"));
      queue.erase(std::remove_if(queue.begin(), queue.end(),
                                 [&](const slot_pool_state::entry& e) { return e.request == request; }),
                  queue.end());
      if (queue.empty())
        st.queues.erase(q);
    },
    [=](atom::join, std::vector<evaluator_actor>& fresh) {
      auto& st = self->state;
      spdlog::info("slot_pool: {} slots joined", fresh.size());
      for (auto& e : fresh) {
        self->monitor(e);
        st.idle.push_back(e);
        ++st.slots;
      }
      dispatch(self);
    },
    [=](atom::status) -> std::string {
      auto& st = self->state;
      nlohmann::json queued = nlohmann::json::object();
      for (auto& [client, queue] : st.queues)
        queued[client] = queue.size();
      nlohmann::json running = nlohmann::json::object();
      for (auto& [addr, client] : st.busy_client)
        running[client] = running.value(client, 0) + 1;
      return nlohmann::json{{"slots", st.slots}, {"busy", st.busy.size()}, {"queued", queued},
                            {"running", running}, {"dispatched", st.dispatched}}
        .dump();
    },
  };
}

coordinator_actor::behavior_type rejoin_to_pool(coordinator_actor::pointer self, slot_pool_actor pool) {
  return {
    [](atom::run) -> caf::result<sweep_report> {
      return make_error(errc::bad_input, "the serving pool's stand-in runs no sweep");
    },
    [=](atom::join, std::vector<evaluator_actor>& fresh) { self->send(pool, atom::join_v, std::move(fresh)); },
    [](atom::stop) {},
    [](atom::halt) {},
  };
}

evaluator_actor::behavior_type pool_slot(evaluator_actor::pointer self, slot_pool_actor pool,
                                         std::string client, std::string request) {
  return {
    [=](atom::evaluate, eval_job& job) {
      return self->delegate(pool, atom::evaluate_v, client, request, std::move(job));
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

} // namespace bb
