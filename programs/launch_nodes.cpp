#include "programs/launch_nodes.hpp"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/config.hpp"
#include "cluster/curve_keys.hpp"
#include "cluster/hostfile.hpp"
#include "cluster/local_nodes.hpp"
#include "cluster/slurm.hpp"
#include "messages/errors.hpp"
#include "process/spawn.hpp"

namespace bb {

namespace {

// bbnode beside the runner this sweep uses (on other machines: the same path).
std::string bbnode_program(const cluster_request& req) {
  auto runner = req.s.runner.empty() ? default_runner_path() : req.s.runner;
  return (std::filesystem::path(runner).parent_path() / "bbnode").string();
}

// Runs a launcher's command in the background, its output to `log`; returns its pid (-1 when
// it did not start, said in the log). It gets SIGTERM when the thread that called this ends
// (the sweep's main thread: bbcluster's end), so a killed coordinator leaves no node behind.
pid_t spawn(std::vector<std::string> words, const std::string& log) {
  std::filesystem::create_directories(std::filesystem::path(log).parent_path());
  spawn_spec spec;
  spec.argv = std::move(words);
  spec.out = stdio_spec::append_to(log);
  spec.err = stdio_spec::to_stdout();
  // Its own process group: Ctrl-C at bbcluster's terminal stops the sweep gracefully and
  // must not end the nodes under the jobs they are finishing.
  spec.group = process_group::new_group;
  spec.parent_death_signal = SIGTERM;
  auto child = spawn_process(spec);
  if (!child.ok())
    spdlog::error("bbcluster: {}", child.error);
  return child.pid;
}

// The bbnode arguments every launcher passes on.
std::vector<std::string> node_arguments(const cluster_request& req) {
  std::vector<std::string> words;
  if (!req.config.empty())
    words.insert(words.end(), {"--config", std::filesystem::absolute(req.config).string()});
  if (!req.s.node_keys.empty())
    words.insert(words.end(), {"--keys", std::filesystem::absolute(req.s.node_keys).string()});
  return words;
}

// Starts one bbnode on this machine on a free loopback port, as `name`, and records it in
// `nodes_dir` (absolute) beside its endpoint file; returns its pid (or -1).
pid_t launch_local(const host_entry& h, const std::string& name, const cluster_request& req,
                   const std::string& nodes_dir) {
  auto logs = nodes_dir + "/" + name;
  std::vector<std::string> words = {bbnode_program(req), "--listen", "tcp://127.0.0.1:0", "--name",
                                    name, "--devices", std::to_string(h.slots), "--endpoint-file",
                                    nodes_dir + "/" + name + ".endpoint", "--log-dir", logs};
  auto more = node_arguments(req);
  words.insert(words.end(), more.begin(), more.end());
  pid_t pid = spawn(words, logs + "/bbnode.log");
  if (pid > 0)
    if (auto err = record_local_node(nodes_dir, name, pid); !err.empty())
      spdlog::warn("bbcluster: {} (a later sweep on this folder cannot end it if it outlives us)", err);
  return pid;
}

std::string wait_for_file(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty())
      return line;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

} // namespace

std::string open_cluster(caf::actor_system& sys, const cluster_request& req, cluster& out) {
  if ((req.launcher == "ssh" || req.launcher == "slurm") && req.s.node_keys.empty())
    return "--launcher " + req.launcher + " starts nodes that listen beyond loopback: they need "
           "CURVE keys (bbcluster keygen DIR, then nodes.keys = \"DIR\" in the --config file)";
  hostfile hosts;
  if (req.launcher == "slurm") {
    // Inside an allocation: the nodes and their GPUs come from Slurm, one bbnode per node.
    std::string why;
    auto alloc = read_slurm_allocation(current_environment(), why);
    if (!alloc)
      return why;
    for (auto& n : alloc->nodes)
      hosts.hosts.push_back({n, static_cast<uint16_t>(req.s.node_port), std::max<uint32_t>(1, alloc->gpus_per_node), 0});
    std::vector<std::string> words = {"srun", "--nodes", std::to_string(alloc->nodes.size()),
                                      "--ntasks", std::to_string(alloc->nodes.size()),
                                      "--ntasks-per-node", "1", "--kill-on-bad-exit=0",
                                      bbnode_program(req), "--listen",
                                      "tcp://0.0.0.0:" + std::to_string(req.s.node_port)};
    if (alloc->gpus_per_node == 0)
      words.insert(words.end(), {"--devices", "1"});
    auto more = node_arguments(req);
    words.insert(words.end(), more.begin(), more.end());
    out.children.push_back(spawn(words, req.log_dir + "/nodes/srun.log"));
    spdlog::info("bbcluster: Slurm job {}: bbnode on {} nodes through srun", alloc->job_id,
                 alloc->nodes.size());
  } else {
    hosts = load_hostfile(req.hostfile, static_cast<uint16_t>(req.s.node_port));
  }
  if (!hosts.errors.empty()) {
    // A few lines say what is wrong; thousands (a binary file) would bury everything else.
    constexpr size_t shown = 5;
    std::string all;
    for (size_t i = 0; i < hosts.errors.size() && i < shown; ++i)
      all += (all.empty() ? "" : "\n") + hosts.errors[i];
    if (hosts.errors.size() > shown)
      all += "\n... and " + std::to_string(hosts.errors.size() - shown) + " more errors";
    return all;
  }
  if (hosts.hosts.empty())
    return req.hostfile + ": no hosts";
  // One name per node, none shared: a node's endpoint file, logs and --name are its own.
  auto names = node_names(hosts.hosts, static_cast<uint16_t>(req.s.node_port));
  std::vector<std::pair<std::string, std::string>> endpoints; // name, endpoint
  if (req.launcher == "local") {
    auto dir = std::filesystem::absolute(req.log_dir + "/nodes").lexically_normal().string();
    std::filesystem::create_directories(dir);
    std::vector<std::string> files;
    for (size_t i = 0; i < hosts.hosts.size(); ++i) {
      files.push_back(dir + "/" + names[i] + ".endpoint");
      std::filesystem::remove(files.back());
      out.children.push_back(launch_local(hosts.hosts[i], names[i], req, dir));
      out.records.push_back(local_node_record_path(dir, names[i]));
    }
    for (size_t i = 0; i < hosts.hosts.size(); ++i) {
      auto endpoint = wait_for_file(files[i], req.s.start_timeout_s + 30);
      if (endpoint.empty())
        spdlog::error("bbcluster: local node {} did not start (see {}/{}/bbnode.log)", names[i], dir,
                      names[i]);
      else
        endpoints.emplace_back(names[i], endpoint);
    }
  } else if (req.launcher == "ssh") {
    // Each host runs bbnode through ssh; it listens on its port, and we connect to it.
    for (size_t i = 0; i < hosts.hosts.size(); ++i) {
      auto& h = hosts.hosts[i];
      auto port = std::to_string(h.port ? h.port : req.s.node_port);
      std::vector<std::string> words;
      std::istringstream ssh(req.s.ssh);
      for (std::string w; ssh >> w;)
        words.push_back(w);
      // -tt: the remote bbnode gets a terminal, so it hangs up when the ssh session ends.
      words.insert(words.end(), {"-tt", h.host, bbnode_program(req), "--listen", "tcp://0.0.0.0:" + port,
                                 "--name", names[i], "--devices", std::to_string(h.slots)});
      auto more = node_arguments(req);
      words.insert(words.end(), more.begin(), more.end());
      out.children.push_back(spawn(words, req.log_dir + "/nodes/" + names[i] + "/ssh.log"));
    }
  }
  if (req.launcher == "none" || req.launcher == "ssh" || req.launcher == "slurm") {
    for (size_t i = 0; i < hosts.hosts.size(); ++i) {
      auto& h = hosts.hosts[i];
      auto host = h.host.find(':') != std::string::npos ? "[" + h.host + "]" : h.host;
      endpoints.emplace_back(names[i],
                             "tcp://" + host + ":" + std::to_string(h.port ? h.port : req.s.node_port));
    }
  } else if (req.launcher != "local") {
    return "unknown launcher '" + req.launcher + "' (none, local, ssh, slurm)";
  }
  curve_keypair mine, theirs;
  if (!req.s.node_keys.empty()) {
    for (auto err : {read_curve_keys(req.s.node_keys + "/coordinator.key", mine),
                     read_curve_keys(req.s.node_keys + "/node.pub", theirs)})
      if (!err.empty())
        return err;
  }
  for (auto& [name, endpoint] : endpoints) {
    remote_node_config rcfg;
    rcfg.node_key = theirs.public_key;
    rcfg.public_key = mine.public_key;
    rcfg.secret_key = mine.secret_key;
    rcfg.endpoint = endpoint;
    rcfg.name = name;
    rcfg.heartbeat_s = req.s.heartbeat_s;
    rcfg.silence_s = req.s.node_silence_s;
    rcfg.connect_timeout_s = req.s.node_connect_timeout_s;
    rcfg.max_message_mb = req.s.max_message_mb;
    rcfg.settings = sweep_settings_of(req.s);
    auto link = std::make_unique<remote_node>(sys, rcfg);
    auto slots = link->connect();
    if (!slots) {
      spdlog::error("bbcluster: node {}: {}", name, describe(slots.error()));
      continue;
    }
    spdlog::info("bbcluster: node {} at {}: {} {} slots, torch {}", name, endpoint,
                 link->info().slots, link->info().device, link->info().torch_version);
    out.slots.insert(out.slots.end(), slots->begin(), slots->end());
    out.links.push_back(std::move(link));
  }
  if (out.slots.empty())
    return "no node of " + req.hostfile + " answered";
  return "";
}

void close_cluster(cluster& c) {
  for (auto& link : c.links)
    link->stop();
  for (auto pid : c.children)
    if (pid > 0)
      ::kill(pid, SIGTERM);
  for (auto pid : c.children) {
    if (pid <= 0)
      continue;
    int status = 0;
    if (wait_for_exit(pid, 5000, status) == wait_outcome::running) {
      ::kill(pid, SIGKILL);
      wait_for_exit(pid, -1, status);
    }
  }
  c.children.clear();
  std::error_code ec;
  for (auto& record : c.records)
    std::filesystem::remove(record, ec);
  c.records.clear();
}

} // namespace bb
