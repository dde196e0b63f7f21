#include "transport/remote_node.hpp"

#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "transport/zmq_wake.hpp"
#include "cluster/config.hpp"
#include "messages/errors.hpp"
#include "messages/input_stream.hpp"

namespace bb {

namespace {

std::string wake_endpoint(const void* link) {
  return "inproc://bbcluster-link-" + std::to_string(reinterpret_cast<uintptr_t>(link));
}

} // namespace

// What the link's thread, its slot actors and the link's owner share; `m` guards all but the
// context and the flag.
struct remote_node::shared {
  std::mutex m;
  std::deque<wire_message> outbox;
  zmq::context_t ctx;
  std::vector<remote_slot_actor> slots;
  coordinator_actor coordinator;
  // What the node said of itself at its last welcome; the thread replaces it when the node
  // rejoins, while the owner may be reading it (remote_node::info).
  node_info info;
  std::atomic<bool> stopping{false};

  // Queues a message for the node and wakes the thread.
  void post(wire_message msg) {
    std::lock_guard<std::mutex> guard(m);
    outbox.push_back(std::move(msg));
    wake(ctx, wake_endpoint(this));
  }

  // Wakes the thread with nothing to send (to see `stopping`).
  void wake_thread() {
    std::lock_guard<std::mutex> guard(m);
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
      msg.kind = node_message::job;
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

node_info remote_node::info() const {
  std::lock_guard<std::mutex> guard(state_->m);
  return state_->info;
}

void remote_node::stop() {
  if (!thread_.joinable())
    return;
  state_->stopping = true;
  state_->wake_thread();
  thread_.join();
}

namespace {

// The link's thread: one DEALER socket to the node, in named steps. It greets the node, then
// loops: forward what the slots queued, route what the node sent, keep the heartbeat, and
// declare the node lost when it falls silent; a lost node is greeted again until it answers.
// connect() waits on `welcomed`, which the loop owns with it: the loop answers it once.
class link_loop {
public:
  link_loop(caf::actor_system& sys, const remote_node_config& cfg, std::shared_ptr<remote_node::shared> st,
            std::shared_ptr<std::promise<std::string>> welcomed)
    : sys_(sys), cfg_(cfg), st_(std::move(st)), welcomed_(std::move(welcomed)),
      dealer_(st_->ctx, zmq::socket_type::dealer), wakeups_(st_->ctx, zmq::socket_type::pull),
      monitor_(st_->ctx, zmq::socket_type::pair) {
  }

  void run() {
    open_sockets();
    send(hello());
    while (!st_->stopping) {
      zmq::pollitem_t items[] = {{dealer_.handle(), 0, ZMQ_POLLIN, 0},
                                 {wakeups_.handle(), 0, ZMQ_POLLIN, 0},
                                 {monitoring_ ? monitor_.handle() : nullptr, 0,
                                  static_cast<short>(monitoring_ ? ZMQ_POLLIN : 0), 0}};
      if (!poll_some(items, 100))
        continue;
      if ((items[2].revents & ZMQ_POLLIN) && !watch_handshake())
        return; // the CURVE handshake failed before the welcome
      if (items[1].revents & ZMQ_POLLIN)
        drain(wakeups_);
      forward_outbox();
      if ((items[0].revents & ZMQ_POLLIN) && !receive_all())
        return; // refused before the welcome
      if (!answered_ && seconds_since(started_) > cfg_.connect_timeout_s) {
        answer("node " + cfg_.name + " (" + cfg_.endpoint + ") did not answer within "
               + std::to_string(int(cfg_.connect_timeout_s)) + " s"
               + (refusals_logged_.empty() ? std::string(": is it up, and do its CURVE keys match ours?")
                                           : ": it refused us (see above)"));
        return;
      }
      beat();
      watch_silence();
    }
    if (connected_)
      send(kind(node_message::bye));
    lose("the sweep ended");
  }

private:
  using clock = std::chrono::steady_clock;

  static wire_message kind(node_message k) {
    wire_message m;
    m.kind = k;
    return m;
  }

  // A hello carries the sweep's settings, which the node applies before it welcomes us.
  wire_message hello() const {
    auto m = kind(node_message::hello);
    m.settings = cfg_.settings;
    return m;
  }

  // connect()'s answer, given once: "" (welcomed) or why not.
  void answer(std::string why) {
    if (answered_)
      return;
    answered_ = true;
    welcomed_->set_value(std::move(why));
  }

  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }

  void open_sockets() {
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::maxmsgsize, cfg_.max_message_mb << 20);
    wakeups_.bind(wake_endpoint(st_.get()));
    if (!cfg_.node_key.empty()) {
      dealer_.set(zmq::sockopt::curve_serverkey, cfg_.node_key);
      dealer_.set(zmq::sockopt::curve_publickey, cfg_.public_key);
      dealer_.set(zmq::sockopt::curve_secretkey, cfg_.secret_key);
    }
    if (!cfg_.node_key.empty()) {
      // CURVE failures never reach the socket as messages: its monitor says what went wrong.
      monitoring_ = start_monitor(dealer_, monitor_, this,
                                  ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                    | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                    | ZMQ_EVENT_DISCONNECTED);
    }
    dealer_.connect(cfg_.endpoint);
  }

  // The events waiting on the socket's monitor; false when the handshake failed before the node
  // welcomed us (connect() then says why, within a second or so, not at its timeout).
  bool watch_handshake() {
    while (auto e = next_monitor_event(monitor_)) {
      auto event = e->event;
      std::string why;
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        handshaken_ = true;
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        why = "the node does not accept this coordinator's key (nodes.keys must hold the coordinator "
              "key the node was started with)";
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        why = "the CURVE handshake failed: the node's key in nodes.keys is not this node's, or the node "
              "runs without keys";
      } else if (event == ZMQ_EVENT_DISCONNECTED && !handshaken_ && ++drops_ >= 3) {
        why = "the node drops the connection during the CURVE handshake (3 times): the node's key in "
              "nodes.keys is not this node's, or the node runs without keys";
      }
      if (!why.empty() && !answered_) {
        answer("node " + cfg_.name + " (" + cfg_.endpoint + "): " + why);
        return false;
      }
    }
    return true;
  }

  // Every message carries the session, so that the node knows this coordinator from others.
  void send(wire_message m) {
    m.session = session_;
    dealer_.send(zmq::buffer(pack(m)), zmq::send_flags::dontwait);
  }

  static std::string new_session() {
    std::random_device rd;
    std::ostringstream out;
    out << std::hex << rd() << rd() << rd() << rd();
    return out.str();
  }

  // What the slot actors queued (jobs), sent while the node is connected.
  void forward_outbox() {
    std::deque<wire_message> out;
    {
      std::lock_guard<std::mutex> guard(st_->m);
      out.swap(st_->outbox);
    }
    for (auto& m : out)
      if (connected_)
        send(m);
  }

  // Every message waiting on the socket; false when the node refused us before welcoming.
  bool receive_all() {
    for (;;) {
      zmq::message_t payload;
      if (!dealer_.recv(payload, zmq::recv_flags::dontwait))
        return true;
      wire_message msg;
      try {
        msg = unpack<wire_message>(payload.to_string());
      } catch (const std::exception& e) {
        spdlog::error("node {}: malformed message: {}", cfg_.name, e.what());
        continue;
      }
      if (msg.kind == node_message::refuse) {
        // A refusal is never a heartbeat: a node that keeps refusing falls silent and is lost.
        bool busy = msg.text.rfind(busy_refusal, 0) == 0;
        if (refusals_logged_.insert(msg.text.substr(0, msg.text.find('('))).second)
          spdlog::error("node {}: refused: {}{}", cfg_.name, msg.text,
                        busy && !answered_ ? "; greeting it again until it is free" : "");
        if (!answered_ && !busy) {
          answer("node " + cfg_.name + " refused: " + msg.text);
          return false;
        }
        continue;
      }
      last_heard_ = clock::now();
      if (msg.kind == node_message::welcome) {
        if (!welcome(msg))
          return false;
      } else if (msg.kind == node_message::result) {
        route_result(msg);
      } else if (msg.kind == node_message::input) {
        // One input's records of a served request's job: to this process's sink (the server).
        publish_input(msg.text, msg.result, msg.input_index);
      }
    }
  }

  // The node's welcome: the first one answers connect(); a later one is a lost node back.
  // False when the node applied other settings than the sweep's: it is refused.
  bool welcome(const wire_message& msg) {
    if (!cfg_.settings.empty()) {
      auto differences = settings_differences(cfg_.settings, msg.settings);
      if (!differences.empty()) {
        std::string list;
        for (auto& d : differences)
          list += (list.empty() ? "" : "; ") + d;
        auto why = "node " + cfg_.name + " (" + cfg_.endpoint + ") applied other settings than "
                   "this sweep's (" + list + "): is it another bbcluster version?";
        spdlog::error("{}", why);
        // The node took our session: it is free again at once, not after its silence.
        send(kind(node_message::bye));
        if (!answered_) {
          answer(why);
        } else if (connected_) {
          lose(why);
        }
        return false;
      }
    }
    // A welcome to a hello queued while the link was down, after the one that connected it:
    // the slots handed out stay.
    if (answered_ && connected_)
      return true;
    make_slots(msg.node);
    if (!answered_) {
      connected_ = true;
      answer("");
    } else if (!connected_) {
      connected_ = true;
      rejoin();
    }
    return true;
  }

  // Fresh slot actors for the node's slots, published with what the node said of itself.
  void make_slots(const node_info& node) {
    std::vector<remote_slot_actor> slots;
    for (uint32_t i = 0; i < node.slots; ++i)
      slots.push_back(sys_.spawn(remote_slot, st_, i, cfg_.name));
    std::lock_guard<std::mutex> guard(st_->m);
    st_->info = node;
    st_->slots = slots;
  }

  void rejoin() {
    std::vector<evaluator_actor> fresh;
    coordinator_actor coordinator;
    {
      std::lock_guard<std::mutex> guard(st_->m);
      fresh.assign(st_->slots.begin(), st_->slots.end());
      coordinator = st_->coordinator;
    }
    spdlog::info("node {}: back; rejoining with {} slots", cfg_.name, fresh.size());
    if (coordinator)
      caf::anon_send(coordinator, atom::join_v, std::move(fresh));
  }

  void route_result(wire_message& msg) {
    remote_slot_actor slot;
    {
      std::lock_guard<std::mutex> guard(st_->m);
      if (msg.slot < st_->slots.size())
        slot = st_->slots[msg.slot];
    }
    if (slot)
      caf::anon_send(slot, atom::result_v, std::move(msg.result));
  }

  // Heartbeats; a lost node is greeted again: when it answers, it rejoins.
  void beat() {
    if (seconds_since(last_beat_) < cfg_.heartbeat_s)
      return;
    last_beat_ = clock::now();
    send(answered_ && connected_ ? kind(node_message::ping) : hello());
  }

  void watch_silence() {
    if (!connected_ || seconds_since(last_heard_) <= cfg_.silence_s)
      return;
    auto why = "silent for " + std::to_string(int(seconds_since(last_heard_))) + " s";
    spdlog::error("node {}: lost ({}); its jobs go back to the queue", cfg_.name, why);
    lose(why);
  }

  // The slots quit (their jobs fail and are requeued); queued jobs are dropped.
  void lose(const std::string& why) {
    std::vector<remote_slot_actor> slots;
    {
      std::lock_guard<std::mutex> guard(st_->m);
      slots.swap(st_->slots);
      st_->outbox.clear();
    }
    for (auto& s : slots)
      caf::anon_send(s, atom::lost_v, why);
    connected_ = false;
  }

  caf::actor_system& sys_;
  const remote_node_config& cfg_;
  std::shared_ptr<remote_node::shared> st_;
  std::shared_ptr<std::promise<std::string>> welcomed_;
  const std::string session_ = new_session();
  std::set<std::string> refusals_logged_;
  zmq::socket_t dealer_;
  zmq::socket_t wakeups_;
  zmq::socket_t monitor_;
  bool monitoring_ = false;
  bool handshaken_ = false;
  int drops_ = 0;
  bool connected_ = false;
  bool answered_ = false;
  clock::time_point started_ = clock::now();
  clock::time_point last_heard_ = clock::now();
  clock::time_point last_beat_ = clock::now();
};

} // namespace

caf::expected<std::vector<evaluator_actor>> remote_node::connect() {
  // Shared with the thread, which may outlive this call's frame.
  auto welcomed = std::make_shared<std::promise<std::string>>();
  auto answer = welcomed->get_future();
  thread_ = std::thread([this, welcomed] { link_loop(sys_, cfg_, state_, welcomed).run(); });
  auto why = answer.get();
  if (!why.empty()) {
    thread_.join();
    return make_error(errc::runner_failed, why);
  }
  std::lock_guard<std::mutex> guard(state_->m);
  return std::vector<evaluator_actor>(state_->slots.begin(), state_->slots.end());
}

} // namespace bb
