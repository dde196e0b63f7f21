#include "actors/node_server.hpp"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "actors/compile_step.hpp"
#include "actors/zmq_wake.hpp"
#include "results/results.hpp"
#include "messages/errors.hpp"

namespace bb {

namespace {

using clock = std::chrono::steady_clock;

constexpr const char* wake_endpoint = "inproc://bbnode-finished";

// Results finished by actors, waiting for the server thread to send them. Actors may finish
// after the server stopped: then the queue is closed and they drop their results.
struct finished_queue {
  struct item {
    std::string coordinator;
    uint32_t slot;
    eval_result result;
  };
  std::mutex m;
  std::deque<item> items;
  zmq::context_t* ctx = nullptr;

  void push(std::string coordinator, uint32_t slot, eval_result r) {
    std::lock_guard<std::mutex> guard(m);
    if (!ctx)
      return;
    items.push_back({std::move(coordinator), slot, std::move(r)});
    wake(*ctx, wake_endpoint);
  }

  std::deque<item> take() {
    std::lock_guard<std::mutex> guard(m);
    return std::exchange(items, {});
  }

  void close() {
    std::lock_guard<std::mutex> guard(m);
    ctx = nullptr;
  }
};

void send(zmq::socket_t& router, const std::string& to, const wire_message& msg) {
  router.send(zmq::buffer(to), zmq::send_flags::sndmore);
  auto bytes = pack(msg);
  router.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
}

// One ZAP request (RFC 27): accept the CURVE client whose key is `allowed`, refuse others.
void answer_zap(zmq::socket_t& zap, const std::string& allowed) {
  std::vector<zmq::message_t> frames;
  for (;;) {
    zmq::message_t part;
    if (!zap.recv(part, zmq::recv_flags::dontwait))
      break;
    bool more = part.more();
    frames.push_back(std::move(part));
    if (!more)
      break;
  }
  if (frames.size() < 6)
    return;
  bool ok = frames.size() >= 7 && frames[5].to_string() == "CURVE" && frames[6].to_string() == allowed;
  if (!ok)
    spdlog::warn("node_server: refused a peer whose key is not the coordinator's");
  zap.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  zap.send(frames[1], zmq::send_flags::sndmore);
  zap.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
  zap.send(zmq::buffer(std::string(ok ? "OK" : "not the coordinator's key")), zmq::send_flags::sndmore);
  zap.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  zap.send(zmq::str_buffer(""));
}

wire_message reply(std::string kind) {
  wire_message m;
  m.kind = std::move(kind);
  return m;
}

} // namespace

node_server::node_server(caf::actor_system& sys, node_server_config cfg,
                         std::vector<evaluator_actor> slots, compile_pool_actor compiler)
  : sys_(sys), cfg_(std::move(cfg)), slots_(std::move(slots)), compiler_(std::move(compiler)) {
}

std::string node_server::run() {
  zmq::context_t ctx;
  // With CURVE, ZeroMQ asks this ZAP socket about every peer: only the coordinator's key passes.
  zmq::socket_t zap(ctx, zmq::socket_type::rep);
  bool curve = !cfg_.secret_key.empty();
  std::string allowed(32, '\0');
  if (curve) {
    zap.bind("inproc://zeromq.zap.01");
    if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(allowed.data()), cfg_.coordinator_key.c_str()))
      return "the coordinator's public key is not a Z85 key";
  }
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  if (curve) {
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, cfg_.secret_key);
    router.set(zmq::sockopt::zap_domain, "bbcluster");
  }
  try {
    router.bind(cfg_.endpoint);
  } catch (const zmq::error_t& e) {
    return "cannot listen on " + cfg_.endpoint + ": " + e.what();
  }
  auto bound = router.get(zmq::sockopt::last_endpoint);
  if (cfg_.on_bound)
    cfg_.on_bound(bound);
  zmq::socket_t wakeups(ctx, zmq::socket_type::pull);
  wakeups.bind(wake_endpoint);
  auto done = std::make_shared<finished_queue>();
  done->ctx = &ctx;
  std::string coordinator;
  auto last_heard = clock::now();
  auto evaluate_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(cfg_.evaluate_timeout_s));
  spdlog::info("node_server: {} serving {} slots on {}", cfg_.info.name, slots_.size(), bound);

  // Runs one job on its slot (building a native kernel first) in a short-lived actor.
  auto dispatch = [&](const std::string& from, uint32_t slot, eval_job job) {
    auto evaluator = slots_[slot];
    auto compiler = compiler_;
    sys_.spawn([=](caf::event_based_actor* self) mutable {
      prepare_job(
        self, compiler, std::move(job),
        [=](eval_job ready) {
          self->request(evaluator, evaluate_timeout, atom::evaluate_v, ready)
            .then([=](eval_result& r) { done->push(from, slot, std::move(r)); },
                  [=](caf::error& err) {
                    done->push(from, slot,
                               failed_result(ready, outcome::infra_error, "slot lost: " + describe(err)));
                  });
        },
        [=](eval_result failed) { done->push(from, slot, std::move(failed)); });
    });
  };

  while (!stopping_) {
    zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0},
                               {wakeups.handle(), 0, ZMQ_POLLIN, 0},
                               {curve ? zap.handle() : nullptr, 0, static_cast<short>(curve ? ZMQ_POLLIN : 0), 0}};
    if (!poll_some(items, 200))
      continue;
    if (curve && (items[2].revents & ZMQ_POLLIN))
      answer_zap(zap, allowed);
    if (items[1].revents & ZMQ_POLLIN)
      drain(wakeups);
    for (auto& f : done->take()) {
      if (f.coordinator == coordinator)
        send(router, coordinator, [&] {
          auto m = reply("result");
          m.slot = f.slot;
          m.result = std::move(f.result);
          return m;
        }());
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t id, payload;
      if (!router.recv(id) || !id.more() || !router.recv(payload))
        continue;
      while (payload.more()) // a peer that sent more frames than the protocol has
        (void)router.recv(payload);
      std::string from = id.to_string();
      wire_message msg;
      try {
        msg = unpack<wire_message>(payload.to_string());
      } catch (const std::exception& e) {
        auto r = reply("refuse");
        r.text = std::string("malformed message: ") + e.what();
        send(router, from, r);
        continue;
      }
      if (msg.protocol != protocol_version) {
        auto r = reply("refuse");
        r.text = "this node speaks protocol " + std::to_string(protocol_version) + ", not "
                 + std::to_string(msg.protocol) + ": use the same bbcluster version on both sides";
        spdlog::warn("node_server: refused a peer: {}", r.text);
        send(router, from, r);
        continue;
      }
      if (msg.kind == "hello") {
        if (!coordinator.empty() && coordinator != from)
          spdlog::info("node_server: a new coordinator replaces the previous one");
        coordinator = from;
        last_heard = clock::now();
        auto r = reply("welcome");
        r.node = cfg_.info;
        send(router, from, r);
      } else if (from != coordinator) {
        auto r = reply("refuse");
        r.text = "say hello first";
        send(router, from, r);
      } else if (msg.kind == "ping") {
        last_heard = clock::now();
        send(router, from, reply("pong"));
      } else if (msg.kind == "job" && msg.slot < slots_.size()) {
        last_heard = clock::now();
        dispatch(from, msg.slot, std::move(msg.job));
      } else if (msg.kind == "bye") {
        coordinator.clear();
      } else {
        auto r = reply("refuse");
        r.text = "unknown message '" + msg.kind + "' or slot " + std::to_string(msg.slot);
        send(router, from, r);
      }
    }
    if (!coordinator.empty()
        && std::chrono::duration<double>(clock::now() - last_heard).count() > cfg_.coordinator_silence_s) {
      spdlog::warn("node_server: the coordinator was silent for {} s: idle, waiting for the next",
                   cfg_.coordinator_silence_s);
      coordinator.clear();
    }
  }
  done->close();
  return "";
}

} // namespace bb
