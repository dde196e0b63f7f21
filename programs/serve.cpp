#include "programs/serve.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <condition_variable>
#include <thread>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "actors/coordinator.hpp"
#include "actors/directory_generator.hpp"
#include "actors/reporter.hpp"
#include "actors/slot_pool.hpp"
#include "artefacts/kernel_dir.hpp"
#include "cluster/curve_keys.hpp"
#include "messages/errors.hpp"
#include "messages/runner_protocol.hpp"
#include "programs/launch_nodes.hpp"
#include "programs/local_node.hpp"
#include "results/journal.hpp"
#include "results/scoring.hpp"
#include "suite/ops.hpp"
#include "suite/plan.hpp"
#include "messages/input_stream.hpp"
#include "transport/zmq_wake.hpp"

#include <sstream>
#include <unistd.h>

namespace bb {

namespace fs = std::filesystem;
using nlohmann::json;

std::string default_entry(const std::string& op_name) {
  auto name = op_name.rfind("aten.", 0) == 0 ? op_name.substr(5) : op_name;
  auto dot = name.rfind('.');
  if (dot != std::string::npos && name.substr(dot + 1) == "default")
    name = name.substr(0, dot);
  return ops::op_name_to_folder_name(name) + "_kernel_impl";
}

std::string path_component(const std::string& name) {
  std::string out;
  for (char c : name)
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  if (out.empty() || out == "." || out == "..")
    out = "_" + out;
  return out.substr(0, 120);
}

namespace {

// A setting's value as `--set` takes it: a string as it is, a number or a boolean as JSON
// writes it.
std::string setting_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string field_string(const json& msg, const std::string& key, const std::string& fallback = "") {
  auto it = msg.find(key);
  if (it == msg.end() || it->is_null())
    return fallback;
  if (!it->is_string())
    throw std::runtime_error("'" + key + "' must be a string");
  return it->get<std::string>();
}

// The name in `kernels` whose kernel `op_name` takes: of those that select it, the most
// specific (the full name, then without "aten.", then the base name); "" when none does.
std::string kernel_token(const json& kernels, const std::string& op_name) {
  std::string best;
  int best_rank = 0;
  for (auto& [name, k] : kernels.items()) {
    if (!ops::matches(name, op_name))
      continue;
    int rank = name == op_name ? 3 : "aten." + name == op_name ? 2 : 1;
    if (rank > best_rank) {
      best = name;
      best_rank = rank;
    }
  }
  return best;
}

// Settings a request may not change: what the server's evaluators fixed when they started
// (timeouts, memory, sandbox), which would be recorded for the request but not applied.
bool fixed_at_start(const std::string& key) {
  return (key.rfind("evaluator.", 0) == 0 && key != "evaluator.max_attempts") || key.rfind("compile.", 0) == 0;
}

} // namespace

std::string read_request(const json& msg, const settings& base, serve_request& out) {
  try {
    out.id = field_string(msg, "id");
    if (out.id.empty())
      return "'id' is missing: every request needs an id, unique per client";
    auto kernels = msg.find("kernels");
    if (kernels == msg.end() || !kernels->is_object() || kernels->empty())
      return "'kernels' must map operator names to kernels (at least one)";
    out.s = base;
    if (auto st = msg.find("settings"); st != msg.end() && !st->is_null()) {
      if (!st->is_object())
        return "'settings' must map setting keys to values";
      std::map<std::string, setting_scope> scopes;
      for (auto& d : setting_docs())
        scopes[d.key] = d.scope;
      for (auto& [key, value] : st->items()) {
        auto scope = scopes.find(key);
        if (scope == scopes.end())
          return "settings: unknown key '" + key + "' (bbcluster settings toml lists them)";
        if (scope->second != setting_scope::sweep)
          return "settings: '" + key + "' is the server's own (scope " + to_string(scope->second)
                 + "); a request may set only sweep settings";
        if (fixed_at_start(key))
          return "settings: '" + key + "' was fixed when the server's slots started; give it to "
                 "bbcluster serve (--set) instead";
        if (auto err = set_setting(out.s, key, setting_text(value), "the request's settings"))
          return describe(err);
      }
    }
    // A served kernel comes from an agent or a model: checks.extra_inputs "auto" is on, as
    // for the generative backends.
    out.s.timing.extra_inputs = extra_inputs_for(out.s, "kernel_agent");
    plan_request preq;
    preq.suite_name = field_string(msg, "suite", "torchbench");
    preq.data = field_string(msg, "data");
    if (!preq.data.empty()) {
      // A plain file or folder only (never a FIFO or a device, which would block the planner or
      // never end).
      std::error_code ec;
      auto st = fs::status(preq.data, ec);
      if (ec || !fs::exists(st))
        return "'data': no such file on the server: " + preq.data;
      if (!fs::is_regular_file(st) && !fs::is_directory(st))
        return "'data': " + preq.data + " is not a plain file or folder";
      if (preq.data.size() > 8 && preq.data.substr(preq.data.size() - 8) == ".parquet")
        return "'data': a .parquet file is converted by bbcluster's command line (--data); give the "
               "server the converted trace (.jsonl) instead";
    }
    if (auto t = msg.find("topn"); t != msg.end() && !t->is_null()) {
      if (!t->is_number_integer() || t->get<int64_t>() < 0)
        return "'topn' must be a whole number >= 0";
      preq.topn = t->get<size_t>();
    }
    for (auto& [name, k] : kernels->items())
      preq.ops.push_back(name);
    auto plan = make_plan(preq);
    // The plan speaks of the command line's --ops; a request names its operators in kernels.
    auto ours = [](std::string why) {
      if (why.rfind("--ops ", 0) == 0)
        why = "kernels: " + why.substr(6);
      return why;
    };
    if (!plan.fatal.empty())
      return ours(plan.fatal);
    if (!plan.warnings.empty())
      return ours(plan.warnings.front());
    out.work = plan.work;
    // The suite's operators no kernel's name selects are not the request's (the opinfo suite
    // takes every operator of its data whatever the names).
    auto& chosen = out.work.ops;
    chosen.erase(std::remove_if(chosen.begin(), chosen.end(),
                                [&](const op_inputs& op) { return kernel_token(*kernels, op.op_name).empty(); }),
                 chosen.end());
    if (chosen.empty())
      return "kernels: no operator of the suite has a kernel in this request";
    for (auto& op : out.work.ops) {
      auto token = kernel_token(*kernels, op.op_name);
      auto& k = kernels->at(token);
      if (!k.is_object())
        return "kernels: '" + token + "' must map to a kernel (kind, source)";
      auto kind_text = field_string(k, "kind", "py");
      auto kind = parse_enum<kernel_kind>(kind_text);
      if (!kind || *kind == kernel_kind::none)
        return "kernels: '" + token + "': unknown kind '" + kind_text + "' (py, cu, cpp or aten)";
      artefact a;
      if (*kind == kernel_kind::aten) {
        a.kind = kernel_kind::aten;
        a.hash = "aten";
      } else {
        auto source = field_string(k, "source");
        if (source.empty())
          return "kernels: '" + token + "': no source";
        auto entry = field_string(k, "entry", default_entry(op.op_name));
        auto name = field_string(k, "name", token + "." + kind_text);
        if (auto why = kernel_artefact(*kind, source, entry, name, a); !why.empty())
          return "kernels: '" + token + "' for " + op.op_name + ": " + why;
      }
      out.kernels.emplace_back(op.op_name, std::move(a));
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

namespace {

std::atomic<int> stop_signal{0};

extern "C" void on_serve_signal(int sig) {
  stop_signal = sig;
}

using clock = std::chrono::steady_clock;

// What the actors hand to the socket's thread: an operator's result, or a request's end.
struct outgoing {
  std::string key; // the request's: client key, newline, id
  bool done = false;
  eval_result result;
  sweep_report report;
  std::string error;
  /// One input's records as it ended (`result` holds them; `index` is the input's), not an
  /// operator's result.
  bool input = false;
  uint32_t index = 0;
  /// A request's plan, made on the planner's thread (not an actor's result).
  std::shared_ptr<struct planned_request> plan = nullptr;
};

// The actors' side of the socket's thread: a queue and a wake-up.
struct outbox {
  zmq::context_t* ctx = nullptr;
  std::string endpoint;
  std::mutex m;
  std::deque<outgoing> q;
  void push(outgoing o) {
    {
      std::lock_guard<std::mutex> lock(m);
      q.push_back(std::move(o));
    }
    wake(*ctx, endpoint);
  }
  std::deque<outgoing> take() {
    std::lock_guard<std::mutex> lock(m);
    return std::exchange(q, {});
  }
};

// An `evaluate` message read by the planner: the request it asks for, or why it cannot run.
struct planned_request {
  std::string routing;    // the client's connection when it asked
  std::string client_key; // and its key: a connection id used again by another is not it
  std::string client_name;
  std::string id;
  /// What the client's `open` holds for it while it is read: this plan's own mark, so that a
  /// request cancelled and sent again under its id is not taken for the first.
  std::string mark;
  json msg;
  serve_request req;
  std::string why;
};

// Reads `evaluate` messages (read_request: the suite's trace parsed and selected, the
// kernels' artefacts made) on a thread of its own, in the order they came, and hands each
// plan to the socket's thread: a request's plan can take seconds (a large trace), and
// meanwhile pings, status and every other client's messages are answered. One thread: the
// plans of one client come back in the order it sent them. Its state is shared with the
// thread, so that a plan that outlasts the server's stop hands nothing to a server gone.
class planner {
public:
  planner(settings base, outbox& box) : st_(std::make_shared<state>()) {
    st_->base = std::move(base);
    st_->box = &box;
    std::thread([st = st_] { loop(st); }).detach();
  }
  planner(const planner&) = delete;
  planner& operator=(const planner&) = delete;
  /// Those queued are dropped (the server answers their clients); a plan under way is waited
  /// for a few seconds, then left to end on its own, its result dropped.
  ~planner() {
    std::unique_lock<std::mutex> lock(st_->m);
    st_->closed = true;
    st_->q.clear();
    st_->wake.notify_all();
    st_->wake.wait_for(lock, std::chrono::seconds(5), [&] { return st_->ended; });
  }
  void submit(std::shared_ptr<planned_request> p) {
    std::lock_guard<std::mutex> lock(st_->m);
    st_->q.push_back(std::move(p));
    st_->wake.notify_all();
  }

private:
  struct state {
    std::mutex m;
    std::condition_variable wake;
    std::deque<std::shared_ptr<planned_request>> q;
    bool closed = false;
    bool ended = false;
    settings base;
    outbox* box = nullptr;
  };
  static void loop(const std::shared_ptr<state>& st) {
    for (;;) {
      std::shared_ptr<planned_request> p;
      {
        std::unique_lock<std::mutex> lock(st->m);
        st->wake.wait(lock, [&] { return st->closed || !st->q.empty(); });
        if (st->closed) {
          st->ended = true;
          st->wake.notify_all();
          return;
        }
        p = std::move(st->q.front());
        st->q.pop_front();
      }
      try {
        p->why = read_request(p->msg, st->base, p->req);
      } catch (const std::exception& e) {
        p->why = std::string("cannot read this request: ") + e.what();
      }
      std::lock_guard<std::mutex> lock(st->m);
      if (st->closed) {
        st->ended = true;
        st->wake.notify_all();
        return;
      }
      outgoing o;
      o.key = p->client_key + "\n" + p->id;
      o.plan = std::move(p);
      st->box->push(std::move(o));
    }
  }
  std::shared_ptr<state> st_;
};

struct request_state {
  std::string routing; // the client's ZeroMQ routing id ("" once it is gone)
  std::string client;  // its key in the pool
  std::string client_name; // the hello's name: a client connecting again takes it up by it
  std::string id;
  std::string folder;
  double p = 1.0;
  bool cancelled = false;
  std::vector<std::string> ops;
  std::vector<eval_result> results;
  coordinator_actor coordinator;
  generator_actor generator;
  reporter_actor reporter;
  std::vector<evaluator_actor> slots;
};

struct client_state {
  std::string key; // name#n: its queue in the pool, its folder
  std::string name;
  clock::time_point last_heard;
  /// Its unfinished requests: id -> the request's key (its own, or one it took up with resume);
  /// "" while the planner reads it.
  std::map<std::string, std::string> open;
};

class server {
public:
  server(settings s, std::string run_dir, std::string keys, cluster_request nodes)
    : s_(std::move(s)), run_dir_(std::move(run_dir)), keys_(std::move(keys)), creq_(std::move(nodes)) {
  }

  std::string start() {
    if (creq_.hostfile.empty())
      if (auto refusal = sandbox_refusal(s_); !refusal.empty())
        return refusal;
    std::error_code ec;
    fs::create_directories(run_dir_ + "/requests", ec);
    if (ec)
      return "cannot make the run folder " + run_dir_ + ": " + ec.message();
    if (!keys_.empty()) {
      curve_keypair node, coordinator;
      for (auto err : {read_curve_keys(keys_ + "/node.key", node), read_curve_keys(keys_ + "/coordinator.pub", coordinator)})
        if (!err.empty())
          return err;
      secret_ = node.secret_key;
      allowed_.assign(32, '\0');
      if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(allowed_.data()), coordinator.public_key.c_str()))
        return keys_ + "/coordinator.pub: not a Z85 key";
    } else if (!is_loopback_endpoint(s_.serve_listen)) {
      return "serve.listen = " + s_.serve_listen + " is not a loopback address: without CURVE keys "
             "(--keys DIR, from bbcluster keygen) the server listens on this machine only";
    }
    sys_cfg_.add_message_types<caf::id_block::bb>();
    sys_ = std::make_unique<caf::actor_system>(sys_cfg_);
    auto timeout = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(evaluate_timeout_s(s_)));
    if (creq_.hostfile.empty()) {
      node_ = spawn_local_node(*sys_, s_, "local", run_dir_);
      slots_ = node_.evaluators;
      device_ = node_.info.device.empty() ? "cpu" : node_.info.device;
    } else {
      // The nodes of --nodes, as a sweep links them; each builds its own native kernels.
      creq_.log_dir = run_dir_;
      creq_.s = s_;
      if (auto err = open_cluster(*sys_, creq_, nodes_); !err.empty())
        return err;
      slots_ = nodes_.slots;
      device_ = nodes_.links.empty() ? "cpu" : nodes_.links.front()->info().device;
    }
    pool_ = sys_->spawn(slot_pool, slots_, timeout, !nodes_.links.empty());
    if (!nodes_.links.empty()) {
      rejoin_ = sys_->spawn(rejoin_to_pool, pool_);
      for (auto& link : nodes_.links)
        link->set_coordinator(rejoin_);
    }
    box_.ctx = &ctx_;
    box_.endpoint = "inproc://bb-serve-wake";
    wakeups_.bind(box_.endpoint);
    // Each input of a request's jobs, as it ends, from local slots and nodes alike (the
    // jobs' stream_tag is the request's key).
    set_input_sink([box = &box_](const std::string& tag, const eval_result& records, uint32_t index) {
      outgoing o;
      o.key = tag;
      o.input = true;
      o.index = index;
      o.result = records;
      box->push(std::move(o));
    });
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
    router_.set(zmq::sockopt::router_mandatory, 0);
    // Answers are never dropped at a high-water mark: a lost `done` would leave its client
    // waiting. What queues is bounded by the requests' records.
    router_.set(zmq::sockopt::sndhwm, 0);
    zap_.set(zmq::sockopt::linger, 0);
    wakeups_.set(zmq::sockopt::linger, 0);
    if (!secret_.empty()) {
      zap_.bind("inproc://zeromq.zap.01");
      router_.set(zmq::sockopt::curve_server, 1);
      router_.set(zmq::sockopt::curve_secretkey, secret_);
      router_.set(zmq::sockopt::zap_domain, "bbcluster-serve");
    }
    try {
      router_.bind(s_.serve_listen);
    } catch (const zmq::error_t& e) {
      return "cannot listen on " + s_.serve_listen + ": " + e.what();
    }
    bound_ = router_.get(zmq::sockopt::last_endpoint);
    spdlog::info("serve: {} slots ({}{}) on {}{}; requests' reports under {}/requests", slots_.size(), device_,
                 nodes_.links.empty() ? "" : ", on " + std::to_string(nodes_.links.size()) + " nodes", bound_,
                 secret_.empty() ? " (loopback, no keys)" : " (CURVE)", run_dir_);
    // Once the actors can reach this thread (box_): the requests a killed server left.
    restore();
    planner_ = std::make_unique<planner>(s_, box_);
    auto ledger_path = run_dir_ + "/requests.jsonl";
    bool torn = false;
    {
      // A killed server may have left half a line: the next one starts on a line of its own.
      std::ifstream last(ledger_path, std::ios::binary | std::ios::ate);
      if (last && last.tellg() > 0) {
        last.seekg(-1, std::ios::end);
        torn = last.get() != '\n';
      }
    }
    ledger_.open(ledger_path, std::ios::app);
    if (!ledger_)
      return "cannot write " + ledger_path;
    if (torn)
      ledger_ << "\n" << std::flush;
    for (auto& line : pending_ledger_)
      ledger(line);
    pending_ledger_.clear();
    // For scripts and tests: the endpoint actually bound (a port 0 or * becomes a number).
    std::ofstream(run_dir_ + "/endpoint") << bound_ << "\n";
    return "";
  }

  int run() {
    auto last_sweep = clock::now();
    while (stop_signal == 0) {
      // The ZAP socket only under CURVE (an item without a socket would be file descriptor 0).
      zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                 {wakeups_.handle(), 0, ZMQ_POLLIN, 0},
                                 {zap_.handle(), 0, ZMQ_POLLIN, 0}};
      bool polled = false;
      try {
        polled = zmq::poll(items, secret_.empty() ? 2 : 3, std::chrono::milliseconds(500)) >= 0;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR)
          throw;
      }
      if (!polled)
        continue;
      if (!secret_.empty() && (items[2].revents & ZMQ_POLLIN))
        answer_zap();
      if (items[1].revents & ZMQ_POLLIN)
        drain(wakeups_);
      for (auto& o : box_.take())
        deliver(std::move(o));
      for (int n = 0; n < 64 && (items[0].revents & ZMQ_POLLIN); ++n)
        if (!receive())
          break;
      if (clock::now() - last_sweep > std::chrono::seconds(1)) {
        last_sweep = clock::now();
        forget_silent_clients();
      }
    }
    int sig = stop_signal;
    spdlog::warn("serve: {} received: cancelling {} unfinished requests and stopping",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", requests_.size());
    stop();
    return 128 + sig;
  }

  void stop() {
    set_input_sink({});
    planner_.reset();
    // Requests still being read were never accepted: their clients are told to send them again.
    for (auto& [routing, c] : clients_)
      for (auto& [id, mark] : c.open)
        if (!mark.empty() && mark[0] == plan_mark)
          refuse(routing, id, "the server stopped before it had read this request (not started): send it again");
    for (auto& [key, r] : requests_)
      caf::anon_send(r.coordinator, atom::halt_v);
    for (auto& [key, r] : requests_)
      release(r);
    requests_.clear();
    if (sys_) {
      caf::anon_send_exit(pool_, caf::exit_reason::user_shutdown);
      pool_ = nullptr;
      if (rejoin_)
        caf::anon_send_exit(rejoin_, caf::exit_reason::user_shutdown);
      rejoin_ = nullptr;
      close_cluster(nodes_);
      nodes_ = {};
      slots_.clear();
      stop_local_node(*sys_, node_);
      node_ = {};
      sys_.reset();
    }
  }

  ~server() {
    stop();
  }

private:
  void send(const std::string& routing, const json& msg) {
    if (routing.empty())
      return;
    auto bytes = json::to_msgpack(msg);
    router_.send(zmq::buffer(routing), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
  }

  void refuse(const std::string& routing, const std::string& id, const std::string& why) {
    json m{{"kind", "error"}, {"why", why}};
    if (!id.empty())
      m["id"] = id;
    send(routing, m);
  }

  // One message from a client; false when none was waiting.
  bool receive() {
    zmq::message_t who, body;
    if (!router_.recv(who, zmq::recv_flags::dontwait))
      return false;
    while (who.more() && router_.recv(body, zmq::recv_flags::dontwait) && body.more()) {
    }
    auto routing = who.to_string();
    json msg;
    try {
      // msgpack-c first, with bounds on nesting and sizes: nlohmann's reader recurses once per
      // level, and a megabyte of nested arrays would overflow this thread's stack.
      msgpack::unpack(static_cast<const char*>(body.data()), body.size(), nullptr, nullptr,
                      msgpack::unpack_limit(1 << 20, 1 << 20, 64 << 20, 64 << 20, 1 << 10, 32));
      msg = json::from_msgpack(static_cast<const uint8_t*>(body.data()),
                               static_cast<const uint8_t*>(body.data()) + body.size());
    } catch (const std::exception& e) {
      refuse(routing, "", std::string("not a msgpack map this server reads: ") + e.what());
      return true;
    }
    try {
      handle(routing, msg);
    } catch (const std::exception& e) {
      // A field of the wrong type, and anything else a message can do: its sender is told.
      auto id = msg.contains("id") && msg["id"].is_string() ? msg["id"].get<std::string>() : std::string();
      refuse(routing, id, std::string("cannot read this message: ") + e.what());
    }
    return true;
  }

  void handle(const std::string& routing, const json& msg) {
    if (!msg.is_object() || !msg.contains("kind") || !msg["kind"].is_string()) {
      refuse(routing, "", "a message must be a map with a string 'kind'");
      return;
    }
    auto kind = msg["kind"].get<std::string>();
    auto c = clients_.find(routing);
    if (kind == "hello") {
      hello(routing, msg);
      return;
    }
    if (c == clients_.end()) {
      // A client this server does not know (never said hello, forgotten after its silence, or
      // greeting a server that restarted): its requests here, if any, are gone.
      send(routing, {{"kind", "error"}, {"unknown_client", true},
                     {"why", "this server does not know this client (it never said hello, was silent "
                             "longer than serve.client_timeout_s, or the server restarted): say hello again"}});
      return;
    }
    c->second.last_heard = clock::now();
    if (kind == "ping")
      send(routing, {{"kind", "pong"}});
    else if (kind == "evaluate")
      evaluate(routing, c->second, msg);
    else if (kind == "cancel")
      cancel(routing, c->second, msg.contains("id") && msg["id"].is_string() ? msg["id"].get<std::string>() : "");
    else if (kind == "resume")
      resume(routing, c->second, msg.contains("id") && msg["id"].is_string() ? msg["id"].get<std::string>() : "");
    else if (kind == "status")
      status(routing);
    else if (kind == "bye")
      forget(routing, "said bye");
    else
      refuse(routing, "", "unknown kind '" + kind + "'");
  }

  void hello(const std::string& routing, const json& msg) {
    if (!msg.contains("proto") || msg["proto"] != 1) {
      refuse(routing, "", "protocol " + (msg.contains("proto") ? msg["proto"].dump() : std::string("(none)"))
                            + " is not this server's (1)");
      return;
    }
    auto& c = clients_[routing];
    if (c.key.empty()) {
      c.name = msg.contains("client") && msg["client"].is_string() ? msg["client"].get<std::string>() : "client";
      c.key = path_component(c.name).substr(0, 80) + "#" + std::to_string(++connections_);
      spdlog::info("serve: client {} connected", c.key);
    }
    c.last_heard = clock::now();
    send(routing, {{"kind", "welcome"}, {"proto", 1}, {"slots", slots_.size()}, {"device", device_}, {"client", c.key},
                   {"version", "bbcluster " BB_VERSION}});
  }

  void evaluate(const std::string& routing, client_state& c, const json& msg) {
    auto id = msg.value("id", json()).is_string() ? msg["id"].get<std::string>() : std::string();
    if (id.empty()) {
      refuse(routing, id, "'id' is missing: every request needs an id, unique per client");
      return;
    }
    if (c.open.count(id)) {
      refuse(routing, id, "request " + id + " is still running: ids must be unique per client");
      return;
    }
    if (static_cast<int64_t>(c.open.size()) >= s_.serve_max_requests) {
      refuse(routing, id, "this client has " + std::to_string(c.open.size()) + " unfinished requests, the most "
                            "serve.max_requests allows; wait for one to finish");
      return;
    }
    // Read on the planner's thread; the id is the client's meanwhile, under the plan's mark (a
    // cancel or a bye drops it).
    auto p = std::make_shared<planned_request>();
    p->mark = std::string(1, plan_mark) + std::to_string(++plans_);
    c.open[id] = p->mark;
    p->routing = routing;
    p->client_key = c.key;
    p->client_name = c.name;
    p->id = id;
    p->msg = msg;
    planner_->submit(std::move(p));
  }

  // The first character of a plan's mark in a client's `open` (a request's key never has it).
  static constexpr char plan_mark = '\x01';

  // Whether `c` holds request `id` while the planner reads it (as plan `mark`, if given).
  static bool planning(const client_state& c, const std::string& id, const std::string& mark = "") {
    auto o = c.open.find(id);
    return o != c.open.end() && !o->second.empty() && o->second[0] == plan_mark
           && (mark.empty() || o->second == mark);
  }

  // The connection `routing` of key `key`, if it is still here.
  client_state* client_at(const std::string& routing, const std::string& key) {
    auto c = clients_.find(routing);
    return c != clients_.end() && c->second.key == key ? &c->second : nullptr;
  }

  // A request the planner read: started for the connection that holds it (the one that sent
  // it, or one that resumed it meanwhile), or refused; dropped when both left or cancelled it.
  void planned(planned_request& p) {
    auto* sender = client_at(p.routing, p.client_key);
    if (sender && !planning(*sender, p.id, p.mark))
      sender = nullptr;
    client_state* taker = nullptr;
    std::string taker_routing;
    if (auto w = resumers_.find(p.mark); w != resumers_.end()) {
      taker_routing = w->second.first;
      taker = client_at(taker_routing, w->second.second);
      if (taker && !planning(*taker, p.id, p.mark))
        taker = nullptr;
      resumers_.erase(w);
    }
    if (!p.why.empty()) {
      for (auto [c, routing] : {std::make_pair(sender, p.routing), std::make_pair(taker, taker_routing)})
        if (c) {
          c->open.erase(p.id);
          refuse(routing, p.id, p.why);
        }
      return;
    }
    auto* holder = taker ? taker : sender;
    auto routing = taker ? taker_routing : p.routing;
    if (!holder)
      return;
    if (taker && sender)
      sender->open.erase(p.id); // taken up: the sender's leaving no longer cancels it
    std::string why;
    auto ops = p.req.work.ops.size();
    auto* r = start_request(p.client_key, p.client_name, routing, std::move(p.req), {}, "", why);
    if (!r) {
      holder->open.erase(p.id);
      refuse(routing, p.id, why);
      return;
    }
    holder->open[p.id] = r->client + "\n" + p.id;
    ledger({{"event", "accepted"}, {"client", p.client_name}, {"client_key", p.client_key}, {"id", p.id},
            {"folder", r->folder}, {"request", p.msg}});
    spdlog::info("serve: {} request {}: {} operators", p.client_key, p.id, ops);
    send(routing, accepted_message(*r));
  }

  json accepted_message(const request_state& r) {
    std::error_code ec;
    return {{"kind", "accepted"}, {"id", r.id}, {"ops", r.ops}, {"folder", fs::absolute(r.folder, ec).string()}};
  }

  // Starts a checked request: its reporter, generator, stand-in slots and coordinator, and the
  // actor that waits for its end. `previous`: its operators' results from before a restart,
  // reported again, not evaluated again; `folder` "" for a new one. Null and `why` when its
  // folder cannot be made.
  request_state* start_request(const std::string& client_key, const std::string& client_name,
                               const std::string& routing, serve_request req, std::vector<eval_result> previous,
                               std::string folder, std::string& why) {
    auto key = client_key + "\n" + req.id;
    std::error_code ec;
    if (folder.empty())
      // Numbered: an id used again, or two names that read alike as paths, never share one.
      folder = run_dir_ + "/requests/" + path_component(client_key) + "/" + std::to_string(++request_number_) + "-"
               + path_component(req.id).substr(0, 80);
    fs::create_directories(folder, ec);
    if (ec) {
      why = "cannot make the request's folder: " + ec.message();
      return nullptr;
    }
    auto& r = requests_[key];
    r.routing = routing;
    r.client = client_key;
    r.client_name = client_name;
    r.id = req.id;
    r.p = req.s.p;
    r.folder = folder;
    for (auto& op : req.work.ops)
      r.ops.push_back(op.op_name);
    std::set<std::string> done_before;
    for (auto& p : previous)
      done_before.insert(p.op_name);
    r.results = previous;
    std::vector<directory_kernel> kernels;
    for (auto& [op, a] : req.kernels)
      kernels.push_back({op, ops::op_name_to_folder_name(op), a});
    auto& todo = req.work.ops;
    todo.erase(std::remove_if(todo.begin(), todo.end(), [&](const op_inputs& op) { return done_before.count(op.op_name) > 0; }),
               todo.end());
    reporter_config rcfg;
    rcfg.log_dir = r.folder;
    rcfg.command = "bbcluster serve: request " + req.id + " of " + client_key;
    rcfg.p = req.s.p;
    rcfg.expected_jobs = r.ops.size();
    rcfg.previous = std::move(previous);
    rcfg.conditions = sweep_conditions_of(req.s);
    rcfg.reports_interval_s = s_.reports_interval_s;
    auto* box = &box_;
    rcfg.on_result = [box, key](const eval_result& res) { box->push({key, false, res, {}, ""}); };
    r.reporter = sys_->spawn<caf::detached>(reporter, std::move(rcfg));
    r.generator = sys_->spawn(directory_generator, kernels);
    for (size_t i = 0; i < slots_.size(); ++i)
      r.slots.push_back(sys_->spawn(pool_slot, pool_, client_key, req.id));
    coordinator_config ccfg;
    ccfg.work = req.work;
    ccfg.max_attempts = static_cast<uint32_t>(req.s.max_attempts);
    ccfg.job_settings = pack_settings(runner_options_of(req.s));
    ccfg.stream_tag = key; // each input's records stream to this request's client
    // A job may wait in the pool behind other clients' work for as long as they take: the
    // pool bounds each evaluation on its slot (evaluate_timeout_s), the request's coordinator
    // only a job that never comes back at all.
    ccfg.evaluate_timeout = std::chrono::hours(24 * 365);
    r.coordinator = sys_->spawn(coordinator, ccfg, r.generator, r.slots, r.reporter, node_.compiler);
    auto coordinator_handle = r.coordinator;
    sys_->spawn([box, key, coordinator_handle](caf::event_based_actor* self) {
      // A coordinator that dies never answers (CAF 0.17 has no broken promise): its end is
      // the request's, as an error.
      auto answered = std::make_shared<bool>(false);
      self->monitor(coordinator_handle);
      self->set_down_handler([=](caf::down_msg& dm) {
        if (!*answered)
          box->push({key, true, {}, {}, "the request's coordinator ended: " + describe(dm.reason)});
        *answered = true;
        self->quit();
      });
      self->request(coordinator_handle, caf::infinite, atom::run_v)
        .then(
          [=](sweep_report& report) {
            *answered = true;
            box->push({key, true, {}, std::move(report), ""});
            self->quit();
          },
          [=](caf::error& err) {
            if (!*answered)
              box->push({key, true, {}, {}, describe(err)});
            *answered = true;
            self->quit();
          });
    });
    return &r;
  }

  // One line of the run folder's requests.jsonl: what a restarted server takes up.
  void ledger(const json& line) {
    ledger_ << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
    if (!ledger_)
      spdlog::error("serve: cannot write {}/requests.jsonl: a restart would not take up this request", run_dir_);
  }

  // The requests a killed server had accepted and not finished run again (their operators
  // finished before are taken from their folders' journals), under their clients' old names,
  // which a client connecting again under the same name takes up with `resume`; those it
  // finished are remembered for `resume` too.
  void restore() {
    std::ifstream in(run_dir_ + "/requests.jsonl");
    std::map<std::string, json> accepted; // by key
    std::vector<std::string> order;
    std::string text;
    size_t line_number = 0;
    while (std::getline(in, text)) {
      ++line_number;
      json line;
      try {
        line = json::parse(text);
      } catch (const std::exception& e) {
        spdlog::warn("serve: {}/requests.jsonl:{}: not JSON ({}); left out", run_dir_, line_number, e.what());
        continue;
      }
      auto key = line.value("client_key", "") + "\n" + line.value("id", "");
      auto number = line.value("client_key", "");
      if (auto hash = number.rfind('#'); hash != std::string::npos)
        connections_ = std::max<uint64_t>(connections_, std::strtoull(number.c_str() + hash + 1, nullptr, 10));
      auto event = line.value("event", "");
      if (event == "accepted") {
        if (!accepted.count(key))
          order.push_back(key);
        accepted[key] = line;
        ++request_number_;
      } else if ((event == "done" || event == "cancelled") && accepted.count(key)) {
        auto done = event == "done" ? line.value("done", json::object())
                                    : json{{"kind", "done"}, {"id", line.value("id", "")}, {"cancelled", true}};
        remember_finished(accepted[key].value("client", ""), line.value("id", ""), accepted[key].value("folder", ""), done);
        accepted.erase(key);
        order.erase(std::remove(order.begin(), order.end(), key), order.end());
      }
    }
    for (auto& key : order) {
      auto it = accepted.find(key);
      if (it == accepted.end())
        continue;
      auto& line = it->second;
      serve_request req;
      auto id = line.value("id", "");
      if (auto why = read_request(line["request"], s_, req); !why.empty()) {
        spdlog::error("serve: request {} of {} cannot run again: {}", id, line.value("client_key", ""), why);
        could_not_run_again(line, why);
        continue;
      }
      auto folder = line.value("folder", "");
      std::vector<eval_result> previous;
      std::ifstream journal(folder + "/results.jsonl");
      for (std::string l; std::getline(journal, l);) {
        try {
          auto j = json::parse(l);
          if (j.value("event", "") == "job_finished")
            previous.push_back(parse_journal_line(l));
        } catch (const std::exception&) {
          // a torn last line: its operator runs again
        }
      }
      std::string why;
      if (!start_request(line.value("client_key", ""), line.value("client", ""), "", req, previous, folder, why)) {
        spdlog::error("serve: request {} cannot run again: {}", id, why);
        could_not_run_again(line, why);
      } else
        spdlog::info("serve: request {} of {} taken up again after a restart ({} of its operators finished before)",
                     id, line.value("client_key", ""), previous.size());
    }
  }

  // A request restore() cannot start again ends, with why, for `resume` and the next restart.
  void could_not_run_again(const json& accepted, const std::string& why) {
    auto id = accepted.value("id", "");
    json done{{"kind", "done"}, {"id", id}, {"cancelled", false}, {"folder", accepted.value("folder", "")},
              {"error", "it could not run again after a restart: " + why}};
    pending_ledger_.push_back({{"event", "done"}, {"client_key", accepted.value("client_key", "")}, {"id", id}, {"done", done}});
    remember_finished(accepted.value("client", ""), id, accepted.value("folder", ""), done);
  }

  // `resume`: a client connecting again under its name takes up a request it had sent.
  void resume(const std::string& routing, client_state& c, const std::string& id) {
    if (c.open.count(id)) {
      refuse(routing, id, "request " + id + " is already this connection's");
      return;
    }
    // Sent a moment ago by another connection of the name and still with the planner: this
    // one takes it up once it is read (planned()).
    std::vector<std::string> planned_marks;
    for (auto& [other, oc] : clients_)
      if (&oc != &c && oc.name == c.name && planning(oc, id))
        planned_marks.push_back(oc.open[id]);
    if (planned_marks.size() > 1) {
      refuse(routing, id, std::to_string(planned_marks.size()) + " requests " + id + " of clients named " + c.name
                            + " are being read: which one is ambiguous");
      return;
    }
    if (planned_marks.size() == 1) {
      auto& mark = planned_marks.front();
      if (resumers_.count(mark)) {
        refuse(routing, id, "request " + id + " is being taken up by another connection");
        return;
      }
      resumers_[mark] = {routing, c.key};
      c.open[id] = mark;
      return;
    }
    std::vector<std::string> matches;
    for (auto& [key, r] : requests_)
      if (r.client_name == c.name && r.id == id)
        matches.push_back(key);
    if (matches.size() > 1) {
      refuse(routing, id, std::to_string(matches.size()) + " unfinished requests " + id + " of clients named " + c.name
                            + ": which one is ambiguous");
      return;
    }
    if (matches.size() == 1) {
      auto& key = matches.front();
      auto& r = requests_[key];
      // Taken over: the connection that had it no longer cancels it by leaving.
      for (auto& [other, oc] : clients_)
        if (auto o = oc.open.find(id); o != oc.open.end() && o->second == key)
          oc.open.erase(o);
      r.routing = routing;
      c.open[id] = key;
      {
        send(routing, accepted_message(r));
        for (auto& res : r.results)
          send(routing, {{"kind", "result"}, {"id", id}, {"result", clean(res)}});
      }
      return;
    }
    auto done = finished_.find({c.name, id});
    if (done == finished_.end()) {
      refuse(routing, id, "no request " + id + " of a client named " + c.name + " here");
      return;
    }
    auto& [folder, message] = done->second;
    std::error_code ec;
    json ops = message.value("ops", json::array());
    std::vector<json> results;
    std::ifstream journal(folder + "/results.jsonl");
    for (std::string l; std::getline(journal, l);) {
      try {
        auto j = json::parse(l);
        if (j.value("event", "") != "job_finished")
          continue;
        j.erase("event");
        results.push_back(std::move(j));
      } catch (const std::exception&) {
      }
    }
    send(routing, {{"kind", "accepted"}, {"id", id}, {"ops", ops}, {"folder", fs::absolute(folder, ec).string()}});
    for (auto& j : results)
      send(routing, {{"kind", "result"}, {"id", id}, {"result", j}});
    auto end = message;
    end.erase("ops");
    send(routing, end);
  }

  // What `resume` answers for a finished request; the last max_finished are kept.
  void remember_finished(const std::string& name, const std::string& id, const std::string& folder, json done) {
    constexpr size_t max_finished = 100000;
    auto key = std::make_pair(name, id);
    if (!finished_.count(key))
      finished_order_.push_back(key);
    finished_[key] = {folder, std::move(done)};
    if (finished_order_.size() > max_finished) {
      finished_.erase(finished_order_.front());
      finished_order_.pop_front();
    }
  }

  static json clean(const eval_result& r) {
    return json::parse(json(r).dump(-1, ' ', false, json::error_handler_t::replace));
  }

  // A request's end, as its client is told: its scores (BackendBench's lines in `text`).
  static json done_message(const std::string& id, const scores& s, const std::string& text, bool cancelled,
                           const std::string& folder) {
    return {{"kind", "done"},
            {"id", id},
            {"scores",
             {{"correctness", s.correctness}, {"performance", s.performance}, {"perf_at_p", s.perf_at_p},
              {"perf_at_p_significant", s.perf_at_p_significant}}},
            {"scores_text", text},
            {"cancelled", cancelled},
            {"folder", folder}};
  }

  void cancel(const std::string& routing, client_state& c, const std::string& id) {
    auto open = c.open.find(id);
    if (open != c.open.end() && planning(c, id)) {
      // Still with the planner: it never starts, and its end is told at once; not for the
      // connection that sent it either, when this one had taken it up.
      auto mark = open->second;
      c.open.erase(open);
      if (auto w = resumers_.find(mark); w != resumers_.end() && w->second.first == routing) {
        resumers_.erase(w);
        for (auto& [other, oc] : clients_)
          if (&oc != &c && planning(oc, id, mark))
            oc.open.erase(id);
      }
      send(routing, {{"kind", "cancelled"}, {"id", id}});
      scores none;
      none.performance = 0.0; // nothing ran
      send(routing, done_message(id, none, "", true, ""));
      return;
    }
    auto it = open == c.open.end() ? requests_.end() : requests_.find(open->second);
    if (it == requests_.end()) {
      refuse(routing, id, "no unfinished request " + id + " of this client");
      return;
    }
    halt(it->second);
    send(routing, {{"kind", "cancelled"}, {"id", id}});
  }

  void halt(request_state& r) {
    if (r.cancelled)
      return;
    r.cancelled = true;
    // A restart must not run again what its client gave up.
    ledger({{"event", "cancelled"}, {"client_key", r.client}, {"id", r.id}});
    caf::anon_send(pool_, atom::cancel_v, r.client, r.id);
    caf::anon_send(r.coordinator, atom::halt_v);
  }

  // A client gone (bye, or silent too long): its requests are cancelled; their ends go nowhere.
  void forget(const std::string& routing, const std::string& why) {
    auto c = clients_.find(routing);
    if (c == clients_.end())
      return;
    if (!c->second.open.empty())
      spdlog::info("serve: client {} {}: cancelling its {} unfinished requests", c->second.key, why,
                   c->second.open.size());
    for (auto& [id, key] : c->second.open) {
      auto r = requests_.find(key);
      if (r == requests_.end())
        continue;
      r->second.routing.clear();
      halt(r->second);
    }
    clients_.erase(c);
  }

  void forget_silent_clients() {
    auto limit = std::chrono::duration<double>(s_.serve_client_timeout_s);
    std::vector<std::string> silent;
    for (auto& [routing, c] : clients_)
      if (clock::now() - c.last_heard > limit)
        silent.push_back(routing);
    for (auto& routing : silent)
      forget(routing, "was silent for " + std::to_string(static_cast<int>(s_.serve_client_timeout_s)) + " s");
  }

  void status(const std::string& routing) {
    json pool = json::object();
    {
      caf::scoped_actor self{*sys_};
      self->request(pool_, std::chrono::seconds(5), atom::status_v)
        .receive([&](std::string& text) { pool = json::parse(text); },
                 [&](caf::error& err) { pool["error"] = describe(err); });
    }
    json open = json::object();
    json clients = json::array();
    for (auto& [routing_id, c] : clients_) {
      clients.push_back(c.key);
      open[c.key] = c.open.size();
    }
    json nodes = json::array();
    for (auto& link : nodes_.links)
      nodes.push_back({{"name", link->info().name}, {"slots", link->info().slots}, {"device", link->info().device}});
    if (nodes_.links.empty())
      nodes.push_back({{"name", "local"}, {"slots", slots_.size()}, {"device", device_}});
    send(routing, {{"kind", "status"}, {"nodes", nodes}, {"slots", pool.value("slots", 0)}, {"busy", pool.value("busy", 0)},
                   {"queued", pool.value("queued", json::object())}, {"running", pool.value("running", json::object())},
                   {"requests", open}, {"clients", clients}});
  }

  void deliver(outgoing o) {
    if (o.plan) {
      try {
        planned(*o.plan);
      } catch (const std::exception& e) {
        // Starting it failed (its folder, an actor): its client is told, the server goes on.
        for (auto& [routing, c] : clients_)
          if (planning(c, o.plan->id, o.plan->mark)) {
            c.open.erase(o.plan->id);
            refuse(routing, o.plan->id, std::string("the request could not start: ") + e.what());
          }
      }
      return;
    }
    auto it = requests_.find(o.key);
    if (it == requests_.end())
      return;
    auto& r = it->second;
    if (o.input) {
      // One input's records as it ended: progress, which the operator's result supersedes.
      if (r.cancelled)
        return;
      json records = clean(o.result);
      json message{{"kind", "input"},
                   {"id", r.id},
                   {"op_name", o.result.op_name},
                   {"attempt", o.result.attempt},
                   {"input", o.index}};
      if (!o.result.correctness.empty())
        message["correctness"] = records["correctness"][0];
      if (!o.result.performance.empty())
        message["performance"] = records["performance"][0];
      send(r.routing, message);
      return;
    }
    if (!o.done) {
      // Once the client was told "cancelled", nothing more of the request reaches it: a job the
      // slot pool dropped comes back as a failed result, which is the cancel's, not the kernel's.
      // The `done` scores count it as the request's folder does.
      r.results.push_back(o.result);
      if (r.cancelled)
        return;
      // Kernel output in messages may be any bytes: invalid UTF-8 replaced, as the journal does,
      // so that the client can read the string.
      json record = clean(o.result);
      send(r.routing, {{"kind", "result"}, {"id", r.id}, {"result", record}});
      return;
    }
    auto done = done_message(r.id, score_results(r.results, r.p), o.report.scores_text,
                             r.cancelled || o.report.partial, r.folder);
    if (!o.error.empty())
      done["error"] = o.error;
    done = json::parse(done.dump(-1, ' ', false, json::error_handler_t::replace));
    send(r.routing, done);
    auto recorded = done;
    recorded["ops"] = r.ops;
    ledger({{"event", "done"}, {"client_key", r.client}, {"id", r.id}, {"done", recorded}});
    remember_finished(r.client_name, r.id, r.folder, recorded);
    spdlog::info("serve: {} request {} done{}", r.client, r.id, r.cancelled ? " (cancelled)" : "");
    for (auto& [routing, c] : clients_)
      if (auto o = c.open.find(r.id); o != c.open.end() && o->second == it->first)
        c.open.erase(o);
    // Whatever of the request is still queued (it ended with an error) goes too.
    caf::anon_send(pool_, atom::cancel_v, r.client, r.id);
    release(r);
    requests_.erase(it);
  }

  void release(request_state& r) {
    for (auto& a : r.slots)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(r.coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(r.generator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(r.reporter, caf::exit_reason::user_shutdown);
  }

  // One ZAP request (RFC 27): a client that presents the coordinator's key passes.
  void answer_zap() {
    auto v = bb::answer_zap(zap_, allowed_, "not the coordinator's key");
    if (v.asked && !v.ok)
      spdlog::warn("serve: refused a client from {} whose key is not the coordinator's (public key {})", v.address,
                   v.key);
  }

  settings s_;
  std::string run_dir_, keys_, secret_, allowed_, bound_;
  caf::actor_system_config sys_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  cluster_request creq_;
  local_node node_;
  cluster nodes_;
  std::vector<evaluator_actor> slots_;
  std::string device_ = "cpu";
  coordinator_actor rejoin_;
  slot_pool_actor pool_;
  zmq::context_t ctx_;
  // Destroyed in reverse: the router (and its handshakes) before the ZAP socket they ask.
  zmq::socket_t zap_{ctx_, zmq::socket_type::rep};
  zmq::socket_t wakeups_{ctx_, zmq::socket_type::pull};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  outbox box_;
  std::map<std::string, client_state> clients_;
  std::map<std::string, request_state> requests_;
  uint64_t connections_ = 0;
  uint64_t request_number_ = 0;
  std::ofstream ledger_;
  /// Lines restore() decided before the ledger is open for appending.
  std::vector<json> pending_ledger_;
  /// Requests finished, by (client name, id): their folder and `done`, for `resume`.
  std::map<std::pair<std::string, std::string>, std::pair<std::string, json>> finished_;
  std::deque<std::pair<std::string, std::string>> finished_order_;
  /// Requests still with the planner that another connection resumed: the plan's mark -> (the
  /// resuming connection's routing id, its key).
  std::map<std::string, std::pair<std::string, std::string>> resumers_;
  uint64_t plans_ = 0;
  /// Reads `evaluate` messages off this thread; made once restore() is done, stopped first.
  std::unique_ptr<planner> planner_;
};

} // namespace

namespace {

// `bbcluster NAME ARGS...`'s flags into `app`: -1 to go on, else the exit status (0 after
// --help, 2 for a bad command line, said on stderr).
int parse_subcommand(CLI::App& app, const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv_words{"bbcluster " + name};
  argv_words.insert(argv_words.end(), args.begin(), args.end());
  std::vector<char*> words;
  for (auto& w : argv_words)
    words.push_back(w.data());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "bbcluster " << name << ": error: " << e.what() << " (see --help)\n";
    return 2;
  }
  return -1;
}

// SIGINT and SIGTERM to `handler`.
void catch_stop_signals(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

} // namespace

int serve_main(const std::vector<std::string>& args) {
  CLI::App app{"bbcluster serve: keeps the cluster's slots warm and evaluates the kernels clients submit "
               "(docs/serving.md)"};
  std::string config, listen, keys, log_dir, log_level, nodes, launcher = "none";
  int64_t devices = -1;
  std::vector<std::string> set;
  app.add_option("--config", config, "settings file (TOML)");
  app.add_option("--listen", listen, "ZeroMQ endpoint for clients (serve.listen; default tcp://127.0.0.1:5590)");
  app.add_option("--keys", keys, "CURVE keys folder from bbcluster keygen (nodes.keys): clients need coordinator.key");
  app.add_option("--devices", devices, "evaluator slots (evaluator.devices)");
  app.add_option("--log-dir", log_dir, "run folder: each request's reports go under requests/ (run.log_dir)");
  app.add_option("--log-level", log_level, "log level (log.level)");
  app.add_option("--set", set, "KEY=VALUE: any setting");
  app.add_option("--nodes", nodes, "hostfile: serve with the slots of these bbnodes (as bbcluster --nodes)");
  app.add_option("--launcher", launcher, "none (nodes started by hand) or local (bbcluster starts them here)")
    ->check(CLI::IsMember({"none", "local"}));
  if (int rc = parse_subcommand(app, "serve", args); rc >= 0)
    return rc;
  settings s = default_settings();
  auto fail = [](const std::string& why) {
    std::cerr << "bbcluster serve: " << why << "\n";
    return 2;
  };
  if (!config.empty())
    if (auto err = load_settings(config, s))
      return fail(describe(err));
  for (auto& kv : set) {
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      return fail("--set " + kv + ": expected KEY=VALUE");
    if (auto err = set_setting(s, kv.substr(0, eq), kv.substr(eq + 1), "--set"))
      return fail(describe(err));
  }
  auto flag = [&](const std::string& key, const std::string& value) -> std::string {
    if (value.empty())
      return "";
    auto err = set_setting(s, key, value, "the command line");
    return err ? describe(err) : "";
  };
  for (auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
         {"serve.listen", listen}, {"nodes.keys", keys}, {"run.log_dir", log_dir}, {"log.level", log_level},
         {"evaluator.devices", devices >= 0 ? std::to_string(devices) : ""}})
    if (auto err = flag(key, value); !err.empty())
      return fail(err);
  if (auto err = validate(s))
    return fail(describe(err));
  spdlog::set_level(spdlog::level::from_str(s.log_level));
  auto run_dir = s.log_dir.empty() ? "bbcluster_serve_" + std::to_string(std::time(nullptr)) : s.log_dir;
  catch_stop_signals(on_serve_signal);
  // With keys (nodes.keys), the nodes are reached with them as a sweep reaches them, and the
  // clients must present the same folder's coordinator key pair.
  cluster_request creq;
  creq.hostfile = nodes;
  creq.launcher = launcher;
  creq.config = config;
  server srv(s, run_dir, s.node_keys, creq);
  if (auto err = srv.start(); !err.empty())
    return fail(err);
  return srv.run();
}

namespace {

// The kernels a submit sends: a folder's (directory layout) or one file's, as the request's
// `kernels` map; "" or why not.
std::string submit_kernels(const std::vector<std::string>& paths, const std::string& op, json& out) {
  out = json::object();
  for (auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      auto scan = scan_kernel_dir(path);
      if (!scan.fatal.empty())
        return scan.fatal;
      for (auto& p : scan.problems)
        spdlog::warn("bbcluster submit: {} (left out)", p);
      for (auto& k : scan.kernels)
        out[k.op_name] = {{"kind", to_string(k.kernel.kind)}, {"source", k.kernel.source},
                          {"entry", k.kernel.entry}, {"name", k.kernel.path}};
      continue;
    }
    auto kind = kernel_kind_of(path);
    if (!kind)
      return path + ": not a kernel file (.py, .cpp or .cu) nor a folder of them";
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return path + ": cannot read it";
    std::stringstream text;
    text << in.rdbuf();
    // The operator: --ops, else the file's name before "_implementation" or its extension.
    auto name = op;
    if (name.empty()) {
      name = fs::path(path).stem().string();
      if (auto cut = name.find("_implementation"); cut != std::string::npos)
        name = name.substr(0, cut);
      name = ops::folder_name_to_op_name(name);
    }
    json k{{"kind", to_string(*kind)}, {"source", text.str()}, {"name", path}};
    out[name] = k;
  }
  if (out.empty())
    return "no kernel in " + paths.front();
  return "";
}

std::atomic<int> submit_signal{0};

extern "C" void on_submit_signal(int sig) {
  submit_signal = sig;
}

} // namespace

int submit_main(const std::vector<std::string>& args) {
  CLI::App app{"bbcluster submit: evaluates kernels on a running bbcluster serve (docs/serving.md)"};
  std::vector<std::string> paths, set;
  std::string server = default_settings().serve_listen, keys, suite_name = "smoke", data, op;
  int64_t topn = -1;
  double timeout_s = 10.0;
  app.add_option("paths", paths, "a kernel file, or a folder of operator folders (the directory backend's layout)")
    ->required();
  app.add_option("--server", server, "the server's endpoint (serve.listen)");
  app.add_option("--keys", keys, "CURVE keys folder from bbcluster keygen: coordinator.key and node.pub");
  app.add_option("--suite", suite_name, "smoke, torchbench or opinfo (as bbcluster --suite)");
  app.add_option("--data", data, "trace file on the server's machine (as bbcluster --data)");
  app.add_option("--topn", topn, "inputs per operator (as bbcluster --topn; 0: all)");
  app.add_option("--ops", op, "the operator of a single kernel file (default: from its name)");
  app.add_option("--set", set, "KEY=VALUE: a sweep setting for this request");
  app.add_option("--connect-timeout", timeout_s, "seconds to wait for the server's welcome");
  if (int rc = parse_subcommand(app, "submit", args); rc >= 0)
    return rc;
  auto fail = [](const std::string& why, int rc = 2) {
    std::cerr << "bbcluster submit: " << why << "\n";
    return rc;
  };
  json kernels;
  if (auto err = submit_kernels(paths, op, kernels); !err.empty())
    return fail(err);
  json settings_map = json::object();
  for (auto& kv : set) {
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      return fail("--set " + kv + ": expected KEY=VALUE");
    settings_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 500);
  dealer.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
  if (!keys.empty()) {
    curve_keypair mine, theirs;
    for (auto err : {read_curve_keys(keys + "/coordinator.key", mine), read_curve_keys(keys + "/node.pub", theirs)})
      if (!err.empty())
        return fail(err);
    dealer.set(zmq::sockopt::curve_serverkey, theirs.public_key);
    dealer.set(zmq::sockopt::curve_publickey, mine.public_key);
    dealer.set(zmq::sockopt::curve_secretkey, mine.secret_key);
  }
  try {
    dealer.connect(server);
  } catch (const zmq::error_t& e) {
    return fail("cannot connect to " + server + ": " + e.what());
  }
  auto send = [&](const json& m) {
    auto bytes = json::to_msgpack(m);
    dealer.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
  };
  // The next message within `ms`, or null.
  auto next = [&](int ms) -> json {
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}};
    if (!poll_some(items, ms) || !(items[0].revents & ZMQ_POLLIN))
      return nullptr;
    zmq::message_t m;
    if (!dealer.recv(m, zmq::recv_flags::dontwait))
      return nullptr;
    try {
      return json::from_msgpack(static_cast<const uint8_t*>(m.data()), static_cast<const uint8_t*>(m.data()) + m.size());
    } catch (const std::exception&) {
      return nullptr;
    }
  };
  send({{"kind", "hello"}, {"proto", 1}, {"client", "submit"}});
  auto welcome = next(static_cast<int>(timeout_s * 1000));
  if (welcome.is_null())
    return fail("no answer from " + server + " within " + std::to_string(static_cast<int>(timeout_s))
                  + " s: is bbcluster serve running there" + (keys.empty() ? "" : ", with the keys of " + keys) + "?",
                1);
  if (welcome.value("kind", "") != "welcome")
    return fail(server + " refused: " + welcome.value("why", welcome.dump()), 1);
  json request{{"kind", "evaluate"}, {"id", "submit-" + std::to_string(::getpid())}, {"kernels", kernels},
               {"suite", suite_name}, {"settings", settings_map}};
  if (!data.empty())
    request["data"] = fs::absolute(data).string();
  if (topn >= 0)
    request["topn"] = topn;
  catch_stop_signals(on_submit_signal);
  send(request);
  auto id = request["id"].get<std::string>();
  size_t expected = 0, seen = 0;
  bool cancel_sent = false;
  auto last_ping = clock::now();
  auto last_heard = clock::now();
  for (;;) {
    if (submit_signal != 0 && !cancel_sent) {
      cancel_sent = true;
      std::cerr << "bbcluster submit: cancelling the request\n";
      send({{"kind", "cancel"}, {"id", id}});
    }
    if (clock::now() - last_ping > std::chrono::seconds(2)) {
      send({{"kind", "ping"}});
      last_ping = clock::now();
    }
    auto m = next(200);
    if (m.is_null()) {
      if (clock::now() - last_heard > std::chrono::seconds(60))
        return fail("the server at " + server + " has been silent for 60 s", 1);
      continue;
    }
    last_heard = clock::now();
    auto kind = m.value("kind", "");
    if (kind == "accepted") {
      expected = m["ops"].size();
      std::cerr << "bbcluster submit: " << expected << " operators accepted; the server writes the reports to "
                << m.value("folder", "") << "\n";
    } else if (kind == "result") {
      eval_result r;
      try {
        from_json(m["result"], r);
      } catch (const std::exception& e) {
        return fail(std::string("the server sent a result this submit cannot read: ") + e.what(), 1);
      }
      std::cerr << "[" << ++seen << "/" << expected << "] " << r.op_name << ": " << summarize(r) << "\n";
    } else if (kind == "done") {
      std::cout << m.value("scores_text", "") << std::flush;
      bool cancelled = m.value("cancelled", false);
      if (m.contains("error"))
        return fail("the request failed: " + m["error"].get<std::string>(), 1);
      send({{"kind", "bye"}});
      if (cancelled)
        return submit_signal != 0 ? 128 + submit_signal : fail("the request was cancelled", 1);
      return 0;
    } else if (kind == "error") {
      return fail("refused: " + m.value("why", ""), 2);
    }
  }
}

} // namespace bb
