#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <thread>

#include <atomic>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <zmq.hpp>

#include "transport/node_server.hpp"
#include "transport/remote_node.hpp"
#include "messages/errors.hpp"

using namespace bb;

namespace {

using settings_map = std::map<std::string, std::string>;
using apply_fn = std::function<std::string(const settings_map&, settings_map&, node_slots&)>;

// A node with no slots on a loopback port, applying settings with `apply`, and a coordinator's
// link to it sending `sent`: what connect() said ("" when welcomed).
std::string connect_with(const settings_map& sent, apply_fn apply, settings_map* seen = nullptr) {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  std::promise<std::string> bound;
  node_server_config ncfg;
  ncfg.endpoint = "tcp://127.0.0.1:0";
  ncfg.info.name = "n1";
  ncfg.info.device = "cpu";
  ncfg.on_bound = [&](const std::string& e) { bound.set_value(e); };
  ncfg.apply_settings = [&](const settings_map& s, settings_map& applied, node_slots& slots) {
    if (seen)
      *seen = s;
    return apply(s, applied, slots);
  };
  node_server server(sys, ncfg, {}, compile_pool_actor{});
  std::thread serving([&] { (void)server.run(); });
  auto endpoint = bound.get_future().get();
  std::string out;
  {
    remote_node_config rcfg;
    rcfg.endpoint = endpoint;
    rcfg.name = "n1";
    rcfg.connect_timeout_s = 10;
    rcfg.settings = sent;
    remote_node link(sys, rcfg);
    auto slots = link.connect();
    out = slots ? "" : describe(slots.error());
    link.stop();
  }
  server.stop();
  serving.join();
  return out;
}

// A node named `name` with one slot (no evaluator behind it: no job is sent to it), serving
// on `endpoint` from its own thread until destroyed.
class serving_node {
public:
  serving_node(caf::actor_system& sys, const std::string& endpoint, const std::string& name)
    : server_(sys, config(endpoint, name), {}, compile_pool_actor{}) {
    thread_ = std::thread([this] {
      if (auto why = server_.run(); !why.empty())
        bound_.set_value("cannot serve: " + why);
    });
    endpoint_ = bound_.get_future().get();
  }
  ~serving_node() {
    server_.stop();
    thread_.join();
  }

  /// The endpoint bound, or "cannot serve: ..." why not.
  const std::string& endpoint() const {
    return endpoint_;
  }

private:
  node_server_config config(const std::string& endpoint, const std::string& name) {
    node_server_config ncfg;
    ncfg.endpoint = endpoint;
    ncfg.info.name = name;
    ncfg.info.slots = 1;
    ncfg.info.device = "cpu";
    ncfg.on_bound = [this](const std::string& e) { bound_.set_value(e); };
    return ncfg;
  }

  std::promise<std::string> bound_;
  node_server server_;
  std::thread thread_;
  std::string endpoint_;
};

// A link to node "n1" at `endpoint` that heartbeats every 0.1 s and loses the node after 1 s
// of silence.
remote_node_config quick_link(const std::string& endpoint) {
  remote_node_config rcfg;
  rcfg.endpoint = endpoint;
  rcfg.name = "n1";
  rcfg.heartbeat_s = 0.1;
  rcfg.silence_s = 1;
  rcfg.connect_timeout_s = 10;
  return rcfg;
}

} // namespace

TEST_CASE("a link loses a node that falls silent and rejoins it when it answers again", "[transport]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto first = std::make_unique<serving_node>(sys, "tcp://127.0.0.1:0", "n1");
  const auto endpoint = first->endpoint();
  REQUIRE(endpoint.rfind("tcp://", 0) == 0);
  auto rcfg = quick_link(endpoint);
  remote_node link(sys, rcfg);
  auto slots = link.connect();
  REQUIRE(slots);
  REQUIRE(slots->size() == 1);
  CHECK(link.info().name == "n1");
  // Someone (the sweep, a log line) reads what the node said of itself while the link's
  // thread takes in the node's second welcome.
  std::atomic<bool> reading{true};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (reading) {
      auto info = link.info();
      if (info.slots == 1 && !info.name.empty())
        ++reads;
      std::this_thread::yield();
    }
  });
  // The node goes away: past silence_s its slot quits.
  self->monitor(slots->front());
  first.reset();
  bool lost = false;
  self->receive([&](caf::down_msg&) { lost = true; }, caf::after(std::chrono::seconds(10)) >> [] {});
  CHECK(lost);
  // A node comes back on the same endpoint: the link greets it, and announces its new slot.
  link.set_coordinator(caf::actor_cast<coordinator_actor>(self));
  serving_node second(sys, endpoint, "n1-back");
  CHECK(second.endpoint() == endpoint);
  std::vector<evaluator_actor> fresh;
  self->receive([&](atom::join, std::vector<evaluator_actor>& s) { fresh = std::move(s); },
                caf::after(std::chrono::seconds(10)) >> [] {});
  reading = false;
  reader.join();
  CHECK(reads > 0);
  REQUIRE(fresh.size() == 1);
  CHECK(fresh.front() != slots->front());
  CHECK(link.info().name == "n1-back");
  link.stop();
}

TEST_CASE("a node applies the sweep settings its coordinator sends, or is refused", "[transport]") {
  const settings_map sent = {{"timing.rounds", "3"}, {"timing.timer", "\"adaptive\""}};
  settings_map seen;
  // Applied as sent: welcomed.
  CHECK(connect_with(sent, [](const settings_map& s, settings_map& applied, node_slots&) {
    applied = s;
    return std::string();
  }, &seen) == "");
  CHECK(seen == sent);
  // A node that applies something else (another version's defaults) is refused by name.
  auto other = connect_with(sent, [](const settings_map& s, settings_map& applied, node_slots&) {
    applied = s;
    applied["timing.rounds"] = "5";
    return std::string();
  });
  CHECK(other.find("node n1") != std::string::npos);
  CHECK(other.find("applied other settings than this sweep's (timing.rounds: sent 3, applied 5)")
        != std::string::npos);
  // A node that cannot apply them refuses the coordinator, saying why.
  auto cannot = connect_with(sent, [](const settings_map&, settings_map&, node_slots&) {
    return std::string("evaluator.sandbox = \"required\": bwrap cannot make namespaces here");
  });
  CHECK(cannot.find("refused: this node cannot apply the coordinator's settings: "
                    "evaluator.sandbox = \"required\"") != std::string::npos);
  // A node still finishing an earlier session's jobs answers busy; the link greets it again
  // until it can apply them.
  int tries = 0;
  CHECK(connect_with(sent, [&](const settings_map& s, settings_map& applied, node_slots&) {
    if (++tries < 3)
      return std::string(busy_refusal) + "finishing 1 jobs of an earlier session";
    applied = s;
    return std::string();
  }) == "");
  CHECK(tries == 3);
}

TEST_CASE("a link loses a node that welcomed it and then only refuses", "[transport]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  // A node that welcomes the first hello, then refuses everything: pings, and hellos again.
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:0");
  auto endpoint = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> serving{true};
  std::atomic<int> refused{0};
  std::thread node([&] {
    bool welcomed = false;
    while (serving) {
      zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}};
      if (zmq::poll(items, 1, std::chrono::milliseconds(50)) <= 0)
        continue;
      zmq::message_t id, payload;
      if (!router.recv(id) || !router.recv(payload))
        continue;
      auto msg = unpack<wire_message>(payload.to_string());
      wire_message answer;
      if (msg.kind == node_message::hello && !welcomed) {
        welcomed = true;
        answer.kind = node_message::welcome;
        answer.node.name = "n1";
        answer.node.slots = 1;
        answer.node.device = "cpu";
        answer.settings = msg.settings;
      } else {
        answer.kind = node_message::refuse;
        answer.text = "say hello first";
        ++refused;
      }
      router.send(id, zmq::send_flags::sndmore);
      router.send(zmq::buffer(pack(answer)));
    }
  });
  // Stopped and joined however the test ends (a failed REQUIRE unwinds past it).
  struct stop_node {
    std::atomic<bool>& serving;
    std::thread& node;
    ~stop_node() {
      serving = false;
      node.join();
    }
  } stop{serving, node};
  auto rcfg = quick_link(endpoint);
  {
    remote_node link(sys, rcfg);
    auto slots = link.connect();
    REQUIRE(slots);
    REQUIRE(slots->size() == 1);
    // Its refusals are no heartbeat: past silence_s the node is lost and its slot quits.
    self->monitor(slots->front());
    bool lost = false;
    auto started = std::chrono::steady_clock::now();
    self->receive([&](caf::down_msg&) { lost = true; }, caf::after(std::chrono::seconds(10)) >> [] {});
    CHECK(lost);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
    CHECK(refused > 3);
    link.stop();
  }
}
