#include "actors/remote_node.hpp"

#include <chrono>
#include <deque>
#include <future>
#include <mutex>

#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "actors/zmq_wake.hpp"
#include "messages/errors.hpp"

namespace bb {

namespace {

using clock = std::chrono::steady_clock;

std::string wake_endpoint(const void* link) {
  return "inproc://bbcluster-link-" + std::to_string(reinterpret_cast<uintptr_t>(link));
}

} // namespace

// What the link's thread and its slot actors share.
struct remote_node::shared {
  std::mutex m;
  std::deque<wire_message> outbox;
  zmq::context_t ctx;
  std::vector<remote_slot_actor> slots;
  coordinator_actor coordinator;
  std::atomic<bool> stopping{false};

  // Queues a message for the node and wakes the thread.
  void post(wire_message msg) {
    std::lock_guard<std::mutex> guard(m);
    outbox.push_back(std::move(msg));
    wake(ctx, wake_endpoint(this));
  }
};

namespace {

struct remote_slot_state {
  static inline const char* name = "remote_slot";
  std::shared_ptr<remote_node::shared> link;
  uint32_t slot = 0;
  std::string node;
  std::optional<eval_job> running;
  caf::typed_response_promise<eval_result> promise;
};

// One slot of a node, an evaluator to the coordinator: forwards its job, waits for the result.
remote_slot_actor::behavior_type remote_slot(remote_slot_actor::stateful_pointer<remote_slot_state> self,
                                             std::shared_ptr<remote_node::shared> link, uint32_t slot,
                                             std::string node) {
  self->state.link = std::move(link);
  self->state.slot = slot;
  self->state.node = std::move(node);
  return {
    [=](atom::evaluate, const eval_job& job) -> caf::typed_response_promise<eval_result> {
      auto& st = self->state;
      auto rp = self->make_response_promise<eval_result>();
      if (st.running) {
        rp.deliver(make_error(errc::runner_failed, "slot busy"));
        return rp;
      }
      st.running = job;
      st.promise = rp;
      wire_message msg;
      msg.kind = "job";
      msg.slot = st.slot;
      msg.job = job;
      st.link->post(std::move(msg));
      return rp;
    },
    [=](atom::result, eval_result& r) {
      auto& st = self->state;
      // Jobs are idempotent by id and attempt: anything else is a stale result.
      if (!st.running || r.job_id != st.running->job_id || r.attempt != st.running->attempt)
        return;
      st.running.reset();
      st.promise.deliver(std::move(r));
    },
    [=](atom::lost, const std::string& why) {
      auto err = make_error(errc::runner_failed, "node " + self->state.node + " lost: " + why);
      if (self->state.running)
        self->state.promise.deliver(err);
      self->quit(err);
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

} // namespace

remote_node::remote_node(caf::actor_system& sys, remote_node_config cfg)
  : sys_(sys), cfg_(std::move(cfg)), state_(std::make_shared<shared>()) {
}

remote_node::~remote_node() {
  stop();
}

void remote_node::set_coordinator(coordinator_actor c) {
  std::lock_guard<std::mutex> guard(state_->m);
  state_->coordinator = std::move(c);
}

void remote_node::stop() {
  if (!thread_.joinable())
    return;
  state_->stopping = true;
  state_->post(wire_message{}); // wakes the thread
  thread_.join();
}

caf::expected<std::vector<evaluator_actor>> remote_node::connect() {
  std::promise<std::string> welcomed;
  auto answer = welcomed.get_future();
  thread_ = std::thread([this, &welcomed] {
    auto st = state_;
    zmq::socket_t dealer(st->ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    zmq::socket_t wakeups(st->ctx, zmq::socket_type::pull);
    wakeups.bind(wake_endpoint(st.get()));
    if (!cfg_.node_key.empty()) {
      dealer.set(zmq::sockopt::curve_serverkey, cfg_.node_key);
      dealer.set(zmq::sockopt::curve_publickey, cfg_.public_key);
      dealer.set(zmq::sockopt::curve_secretkey, cfg_.secret_key);
    }
    dealer.connect(cfg_.endpoint);
    auto send = [&](const wire_message& m) { dealer.send(zmq::buffer(pack(m)), zmq::send_flags::dontwait); };
    wire_message hello;
    hello.kind = "hello";
    send(hello);
    bool connected = false, answered = false;
    auto started = clock::now(), last_heard = clock::now(), last_beat = clock::now();
    auto seconds_since = [](clock::time_point t) {
      return std::chrono::duration<double>(clock::now() - t).count();
    };
    // Fresh slot actors for the node's slots.
    auto make_slots = [&] {
      std::vector<remote_slot_actor> slots;
      for (uint32_t i = 0; i < info_.slots; ++i)
        slots.push_back(sys_.spawn(remote_slot, st, i, cfg_.name));
      std::lock_guard<std::mutex> guard(st->m);
      st->slots = slots;
    };
    auto lose = [&](const std::string& why) {
      std::vector<remote_slot_actor> slots;
      {
        std::lock_guard<std::mutex> guard(st->m);
        slots.swap(st->slots);
        st->outbox.clear();
      }
      for (auto& s : slots)
        caf::anon_send(s, atom::lost_v, why);
      connected = false;
    };
    while (!st->stopping) {
      zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}, {wakeups.handle(), 0, ZMQ_POLLIN, 0}};
      if (!poll_some(items, 100))
        continue;
      if (items[1].revents & ZMQ_POLLIN)
        drain(wakeups);
      std::deque<wire_message> out;
      {
        std::lock_guard<std::mutex> guard(st->m);
        out.swap(st->outbox);
      }
      for (auto& m : out)
        if (connected && !m.kind.empty())
          send(m);
      while (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t payload;
        if (!dealer.recv(payload, zmq::recv_flags::dontwait))
          break;
        wire_message msg;
        try {
          msg = unpack<wire_message>(payload.to_string());
        } catch (const std::exception& e) {
          spdlog::error("node {}: malformed message: {}", cfg_.name, e.what());
          continue;
        }
        last_heard = clock::now();
        if (msg.kind == "refuse") {
          spdlog::error("node {}: refused: {}", cfg_.name, msg.text);
          if (!answered) {
            answered = true;
            welcomed.set_value("node " + cfg_.name + " refused: " + msg.text);
            return;
          }
        } else if (msg.kind == "welcome") {
          info_ = msg.node;
          make_slots();
          if (!answered) {
            answered = true;
            connected = true;
            welcomed.set_value("");
          } else if (!connected) {
            connected = true;
            spdlog::info("node {}: back; rejoining with {} slots", cfg_.name, info_.slots);
            std::vector<evaluator_actor> fresh;
            coordinator_actor coordinator;
            {
              std::lock_guard<std::mutex> guard(st->m);
              fresh.assign(st->slots.begin(), st->slots.end());
              coordinator = st->coordinator;
            }
            if (coordinator)
              caf::anon_send(coordinator, atom::join_v, std::move(fresh));
          }
        } else if (msg.kind == "result") {
          remote_slot_actor slot;
          {
            std::lock_guard<std::mutex> guard(st->m);
            if (msg.slot < st->slots.size())
              slot = st->slots[msg.slot];
          }
          if (slot)
            caf::anon_send(slot, atom::result_v, std::move(msg.result));
        }
      }
      if (!answered && seconds_since(started) > cfg_.connect_timeout_s) {
        welcomed.set_value("node " + cfg_.name + " (" + cfg_.endpoint + ") did not answer within "
                           + std::to_string(int(cfg_.connect_timeout_s)) + " s");
        return;
      }
      if (seconds_since(last_beat) >= cfg_.heartbeat_s) {
        last_beat = clock::now();
        wire_message beat;
        // A lost node is greeted again: when it answers, it rejoins.
        beat.kind = connected || !answered ? "ping" : "hello";
        if (answered)
          send(beat);
        else
          send(hello);
      }
      if (connected && seconds_since(last_heard) > cfg_.silence_s) {
        auto why = "silent for " + std::to_string(int(seconds_since(last_heard))) + " s";
        spdlog::error("node {}: lost ({}); its jobs go back to the queue", cfg_.name, why);
        lose(why);
      }
    }
    wire_message bye;
    bye.kind = "bye";
    if (connected)
      send(bye);
    lose("the sweep ended");
  });
  auto why = answer.get();
  if (!why.empty()) {
    thread_.join();
    return make_error(errc::runner_failed, why);
  }
  std::lock_guard<std::mutex> guard(state_->m);
  return std::vector<evaluator_actor>(state_->slots.begin(), state_->slots.end());
}

} // namespace bb
