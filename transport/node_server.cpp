#include "transport/node_server.hpp"

#include <map>

#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "actors/compile_step.hpp"
#include "messages/input_stream.hpp"
#include "transport/zmq_wake.hpp"
#include "results/results.hpp"
#include "messages/errors.hpp"

namespace bb {

namespace {

constexpr const char* wake_endpoint = "inproc://bbnode-finished";

// Results finished by actors, waiting for the server thread to send them. Actors may finish
// after the server stopped: then the queue is closed and they drop their results.
struct finished_queue {
  struct item {
    std::string coordinator;
    uint32_t slot;
    eval_result result;
    /// Not a job's result but one input's records, streamed (its tag and index).
    bool input = false;
    std::string tag;
    uint32_t index = 0;
  };
  std::mutex m;
  std::deque<item> items;
  zmq::context_t* ctx = nullptr;

  void push(std::string coordinator, uint32_t slot, eval_result r) {
    std::lock_guard<std::mutex> guard(m);
    if (!ctx)
      return;
    items.push_back({std::move(coordinator), slot, std::move(r), false, "", 0});
    wake(*ctx, wake_endpoint);
  }

  // One input's records, for the coordinator of the session when it is sent (the one that sent
  // its job, unless that session ended meanwhile: a later coordinator drops a tag it does not
  // know).
  void push_input(std::string tag, eval_result r, uint32_t index) {
    std::lock_guard<std::mutex> guard(m);
    if (!ctx)
      return;
    item i{"", 0, std::move(r), true, std::move(tag), index};
    items.push_back(std::move(i));
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

wire_message reply(node_message kind) {
  wire_message m;
  m.kind = kind;
  return m;
}

} // namespace

namespace {

// One serving session: the node's ROUTER socket (with its ZAP socket under CURVE), in named
// steps. Each round answers ZAP, sends the results the evaluators finished, takes one message
// from a peer and forgets a coordinator that fell silent.
class serve_loop {
public:
  serve_loop(caf::actor_system& sys, const node_server_config& cfg, const std::vector<evaluator_actor>& slots,
             const compile_pool_actor& compiler)
    : sys_(sys), cfg_(cfg), slots_(slots), compiler_(compiler), zap_(ctx_, zmq::socket_type::rep),
      router_(ctx_, zmq::socket_type::router), wakeups_(ctx_, zmq::socket_type::pull),
      done_(std::make_shared<finished_queue>()),
      evaluate_timeout_(std::chrono::duration_cast<caf::timespan>(
        std::chrono::duration<double>(cfg.evaluate_timeout_s))) {
  }

  // Binds the sockets and tells the program where; "" or why it cannot serve.
  std::string bind() {
    // With CURVE, ZeroMQ asks this ZAP socket about every peer: only the coordinator's key passes.
    curve_ = !cfg_.secret_key.empty();
    allowed_.assign(32, '\0');
    if (curve_) {
      zap_.bind("inproc://zeromq.zap.01");
      if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(allowed_.data()), cfg_.coordinator_key.c_str()))
        return "the coordinator's public key is not a Z85 key";
    }
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::maxmsgsize, cfg_.max_message_mb << 20);
    if (curve_) {
      router_.set(zmq::sockopt::curve_server, 1);
      router_.set(zmq::sockopt::curve_secretkey, cfg_.secret_key);
      router_.set(zmq::sockopt::zap_domain, "bbcluster");
    }
    // What never reaches the socket as a message (a failed handshake, a connection dropped
    // for a frame over the limit) its monitor tells, for the log.
    monitoring_ = start_monitor(router_, monitor_, this,
                                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                  | ZMQ_EVENT_DISCONNECTED);
    try {
      router_.bind(cfg_.endpoint);
    } catch (const zmq::error_t& e) {
      return "cannot listen on " + cfg_.endpoint + ": " + e.what();
    }
    auto bound = router_.get(zmq::sockopt::last_endpoint);
    if (cfg_.on_bound)
      cfg_.on_bound(bound);
    wakeups_.bind(wake_endpoint);
    done_->ctx = &ctx_;
    // This process's evaluators stream a served request's inputs here, on to its coordinator.
    set_input_sink([done = done_](const std::string& tag, const eval_result& records, uint32_t index) {
      done->push_input(tag, records, index);
    });
    last_heard_ = clock::now();
    spdlog::info("node_server: {} serving {} slots on {}", cfg_.info.name, slots_.size(), bound);
    return "";
  }

  void serve_round() {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {wakeups_.handle(), 0, ZMQ_POLLIN, 0},
                               {curve_ ? zap_.handle() : nullptr, 0, static_cast<short>(curve_ ? ZMQ_POLLIN : 0), 0},
                               {monitoring_ ? monitor_.handle() : nullptr, 0,
                                static_cast<short>(monitoring_ ? ZMQ_POLLIN : 0), 0}};
    if (!poll_some(items, 200))
      return;
    if (curve_ && (items[2].revents & ZMQ_POLLIN))
      answer_zap();
    if (monitoring_ && (items[3].revents & ZMQ_POLLIN))
      log_connection_events();
    if (items[1].revents & ZMQ_POLLIN)
      drain(wakeups_);
    send_finished();
    if (items[0].revents & ZMQ_POLLIN)
      receive_one();
    forget_silent_coordinator();
  }

  // Results finished after this point are dropped: nobody sends them any more.
  void close() {
    set_input_sink({});
    done_->close();
  }

private:
  using clock = std::chrono::steady_clock;

  // The results the evaluators finished, to the coordinator that sent their jobs.
  void send_finished() {
    for (auto& f : done_->take()) {
      if (f.input) {
        if (!coordinator_.empty())
          send(router_, coordinator_, [&] {
            auto m = reply(node_message::input);
            m.text = std::move(f.tag);
            m.input_index = f.index;
            m.result = std::move(f.result);
            return m;
          }());
        continue;
      }
      if (in_flight_ > 0)
        --in_flight_;
      if (f.coordinator == coordinator_)
        send(router_, coordinator_, [&] {
          auto m = reply(node_message::result);
          m.slot = f.slot;
          m.result = std::move(f.result);
          return m;
        }());
    }
  }

  // Whether a line about `key` (a peer and a reason) is due: once a minute each, so that a
  // peer that keeps sending cannot flood the log, and a person watching sees every kind.
  bool log_due(const std::string& key) {
    auto now = clock::now();
    auto it = logged_.find(key);
    if (it != logged_.end() && now - it->second <= std::chrono::seconds(60))
      return false;
    if (logged_.size() >= 4096)
      logged_.clear();
    logged_[key] = now;
    return true;
  }

  // Refuses a peer and says so in the log (log_due).
  void refuse(const std::string& to, std::string why) {
    if (log_due(to + '\n' + why.substr(0, why.find(':'))))
      spdlog::warn("node_server: refused peer {}: {}", peer_name(to), why);
    auto r = reply(node_message::refuse);
    r.text = std::move(why);
    send(router_, to, r);
  }

  // One ZAP request (RFC 27): accepts the CURVE client whose key is the coordinator's, refuses
  // others, naming the refused key and where it came from (log_due).
  void answer_zap() {
    auto v = bb::answer_zap(zap_, allowed_, "not the coordinator's key");
    if (v.asked && !v.ok && log_due("zap\n" + v.address + "\n" + v.key))
      spdlog::warn("node_server: refused a peer whose key is not the coordinator's: public key {} from "
                   "{} (this node takes only the coordinator.pub of its --keys folder)", v.key, v.address);
  }

  // The router's monitor: handshakes that failed and connections that ended, each kind in
  // the log once a minute (log_due). ZeroMQ drops a frame over the size limit unread and
  // ends its connection; the event does not say which peer, nor why it ended.
  void log_connection_events() {
    while (auto e = next_monitor_event(monitor_)) {
      if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && e->value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
        if (log_due("handshake crypto"))
          spdlog::warn("node_server: a peer failed the CURVE handshake: it does not hold this node's "
                       "public key (a coordinator whose nodes.keys folder has another node.pub)");
      } else if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                 && e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        if (log_due("handshake mechanism"))
          spdlog::warn("node_server: a peer's security does not match this node's: {}",
                       curve_ ? "this node has CURVE keys (--keys) and the peer has none (nodes.keys)"
                              : "the peer has CURVE keys (nodes.keys) and this node runs without (--keys)");
      } else if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        if (log_due("handshake protocol"))
          spdlog::warn("node_server: a peer broke ZeroMQ's protocol in its handshake (error {:#x})", e->value);
      } else if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        if (log_due("handshake failed"))
          spdlog::warn("node_server: a peer's handshake failed: {}", std::strerror(static_cast<int>(e->value)));
      } else if (e->event == ZMQ_EVENT_DISCONNECTED) {
        if (log_due("disconnected"))
          spdlog::info("node_server: a connection ended (a peer leaving, a failed handshake, or a frame "
                       "over {} MiB, nodes.max_message_mb, dropped unread)", cfg_.max_message_mb);
      }
    }
  }

  // A routing id as text (ZeroMQ makes them binary): the first bytes in hex.
  static std::string peer_name(const std::string& id) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < id.size() && i < 8; ++i) {
      out += hex[static_cast<unsigned char>(id[i]) >> 4];
      out += hex[static_cast<unsigned char>(id[i]) & 15];
    }
    return out;
  }

  // One message from a peer: checked, then answered by its kind.
  void receive_one() {
    zmq::message_t id, payload;
    if (!router_.recv(id) || !id.more() || !router_.recv(payload))
      return;
    while (payload.more()) // a peer that sent more frames than the protocol has
      (void)router_.recv(payload);
    std::string from = id.to_string();
    wire_message msg;
    try {
      msg = unpack<wire_message>(payload.to_string());
    } catch (const std::exception& e) {
      refuse(from, std::string("malformed message: ") + e.what());
      return;
    }
    if (msg.protocol != protocol_version) {
      auto why = "this node speaks protocol " + std::to_string(protocol_version) + ", not "
                 + std::to_string(msg.protocol) + ": use the same bbcluster version on both sides";
      refuse(from, why);
      return;
    }
    handle(from, msg);
  }

  void handle(const std::string& from, wire_message& msg) {
    if (msg.kind == node_message::hello) {
      // The session served now keeps the node: the same session may greet again from a new
      // socket (its link reconnected), another peer waits until it ends.
      bool same_session = !session_.empty() && msg.session == session_;
      if (!coordinator_.empty() && coordinator_ != from && !same_session) {
        auto quiet = std::chrono::duration<double>(clock::now() - last_heard_).count();
        refuse(from, std::string(busy_refusal) + "this node serves another coordinator's session (heard from "
                       + std::to_string(static_cast<int>(quiet)) + " s ago); it is free when that one "
                       "says bye or has been silent for " + std::to_string(static_cast<int>(cfg_.coordinator_silence_s)) + " s");
        return;
      }
      // The session's settings, applied before it is served; a node that cannot refuses it.
      std::map<std::string, std::string> applied;
      if (cfg_.apply_settings) {
        node_slots now{slots_, compiler_, std::chrono::duration<double>(evaluate_timeout_).count(),
                       in_flight_};
        if (auto why = cfg_.apply_settings(msg.settings, applied, now); !why.empty()) {
          // Busy: the slots must start again and a session's jobs still run on them.
          if (why.rfind(busy_refusal, 0) == 0) {
            refuse(from, why);
            return;
          }
          spdlog::error("node_server: refused a coordinator: cannot apply its settings: {}", why);
          refuse(from, "this node cannot apply the coordinator's settings: " + why);
          return;
        }
        slots_ = std::move(now.evaluators);
        compiler_ = std::move(now.compiler);
        evaluate_timeout_ = std::chrono::duration_cast<caf::timespan>(
          std::chrono::duration<double>(now.evaluate_timeout_s));
      }
      if (coordinator_.empty())
        spdlog::info("node_server: serving a coordinator's session");
      coordinator_ = from;
      session_ = msg.session;
      last_heard_ = clock::now();
      auto r = reply(node_message::welcome);
      r.node = cfg_.info;
      r.settings = std::move(applied);
      send(router_, from, r);
    } else if (from != coordinator_) {
      refuse(from, "say hello first");
    } else if (msg.kind == node_message::ping) {
      last_heard_ = clock::now();
      send(router_, from, reply(node_message::pong));
    } else if (msg.kind == node_message::job && msg.slot < slots_.size()) {
      last_heard_ = clock::now();
      dispatch(from, msg.slot, std::move(msg.job));
    } else if (msg.kind == node_message::bye) {
      spdlog::info("node_server: the coordinator said bye: idle, waiting for the next");
      coordinator_.clear();
      session_.clear();
    } else {
      refuse(from, std::string("unexpected message '") + to_string(msg.kind) + "' or slot " + std::to_string(msg.slot));
    }
  }

  // A dead coordinator leaves the node idle, ready for the next.
  void forget_silent_coordinator() {
    if (!coordinator_.empty()
        && std::chrono::duration<double>(clock::now() - last_heard_).count() > cfg_.coordinator_silence_s) {
      spdlog::warn("node_server: the coordinator was silent for {} s: idle, waiting for the next",
                   cfg_.coordinator_silence_s);
      coordinator_.clear();
      session_.clear();
    }
  }

  // Runs one job on its slot (building a native kernel first) in a short-lived actor.
  void dispatch(const std::string& from, uint32_t slot, eval_job job) {
    ++in_flight_;
    auto done = done_;
    auto evaluate_timeout = evaluate_timeout_;
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
  }

  caf::actor_system& sys_;
  const node_server_config& cfg_;
  std::vector<evaluator_actor> slots_;
  compile_pool_actor compiler_;
  zmq::context_t ctx_;
  zmq::socket_t zap_;
  zmq::socket_t router_;
  zmq::socket_t wakeups_;
  zmq::socket_t monitor_{ctx_, zmq::socket_type::pair};
  bool monitoring_ = false;
  bool curve_ = false;
  std::string allowed_;
  std::shared_ptr<finished_queue> done_;
  caf::timespan evaluate_timeout_;
  /// Jobs handed to the slots whose results have not come back (any session's).
  size_t in_flight_ = 0;
  /// The routing id and session of the coordinator served now; empty: none.
  std::string coordinator_;
  std::string session_;
  /// When each (peer, reason) refused was last logged.
  std::map<std::string, clock::time_point> logged_;
  clock::time_point last_heard_ = clock::now();
};

} // namespace

node_server::node_server(caf::actor_system& sys, node_server_config cfg,
                         std::vector<evaluator_actor> slots, compile_pool_actor compiler)
  : sys_(sys), cfg_(std::move(cfg)), slots_(std::move(slots)), compiler_(std::move(compiler)) {
}

std::string node_server::run() {
  serve_loop loop(sys_, cfg_, slots_, compiler_);
  if (auto err = loop.bind(); !err.empty())
    return err;
  while (!stopping_)
    loop.serve_round();
  loop.close();
  return "";
}

} // namespace bb
