#include "generate/kernel_agent.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include <stdlib.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "generate/generation.hpp"
#include "results/reports.hpp"
#include "process/subprocess.hpp"

namespace fs = std::filesystem;

namespace bb {

using json = nlohmann::json;

std::string default_adapter_path() {
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "bbcluster_kernel_agent.py" : (self.parent_path() / "bbcluster_kernel_agent.py").string();
}

namespace {

std::string adapter_of(const kernel_agent_config& cfg) {
  return cfg.adapter.empty() ? default_adapter_path() : cfg.adapter;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string last_lines(const std::string& text, size_t n) {
  size_t at = text.size();
  for (size_t i = 0; i < n && at > 0; ++i) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) {
      at = 0;
      break;
    }
  }
  return text.substr(at == 0 ? 0 : at + 1);
}

// The agent's settings as the adapter reads them. No keys: KernelAgent reads those from the
// environment bbcluster passes on.
json agent_settings(const kernel_agent_config& cfg) {
  return {{"model", cfg.model},
          {"provider", cfg.provider},
          {"base_url", cfg.base_url},
          {"num_workers", cfg.workers},
          {"max_rounds", cfg.max_rounds},
          {"generate_default_test", cfg.generate_default_test}};
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  return text;
}

// The run's own folder, once the agent is done: KernelAgent's empty log files go (the adapter
// removes them too, unless it was killed), then the folder when nothing else is left in it.
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    auto name = e.path().filename().string();
    bool agent_log = (name.rfind("agent_", 0) == 0 || name.rfind("manager_", 0) == 0)
                     && e.path().extension() == ".log";
    std::error_code size_ec;
    if (agent_log && e.is_regular_file() && fs::file_size(e.path(), size_ec) == 0 && !size_ec)
      fs::remove(e.path(), ec);
  }
  fs::remove(dir, ec); // only when empty
}

// The line of a round's output that says what failed: the first that speaks of a failure or
// an error, else the exception that ended it (stderr's last line), else its last line.
std::string telling_line(const std::string& stdout_text, const std::string& stderr_text) {
  std::istringstream lines(stdout_text);
  std::regex failing("fail|error|mismatch|not close", std::regex::icase);
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, failing))
      return line;
  for (auto* text : {&stderr_text, &stdout_text}) {
    auto rest = trimmed(*text);
    while (!rest.empty()) {
      auto line = last_lines(rest, 1);
      if (line.rfind("Test exited with code", 0) != 0)
        return line;
      rest = trimmed(rest.substr(0, rest.size() - line.size()));
    }
  }
  return "no output";
}

} // namespace

round_failure last_round_failure(const std::string& session_dir) {
  round_failure out;
  std::string latest;
  std::error_code ec;
  std::regex round_file("round_([0-9]+)\\.json");
  for (auto& worker : fs::directory_iterator(fs::path(session_dir) / "workers", ec)) {
    auto name = worker.path().filename().string();
    if (!worker.is_directory() || name.rfind("worker_", 0) != 0)
      continue;
    int last = -1;
    fs::path last_path;
    for (auto& f : fs::directory_iterator(worker.path(), ec)) {
      std::smatch m;
      auto file = f.path().filename().string();
      if (std::regex_match(file, m, round_file) && std::stoi(m[1].str()) > last) {
        last = std::stoi(m[1].str());
        last_path = f.path();
      }
    }
    if (last < 0)
      continue;
    auto round = json::parse(read_text(last_path), nullptr, false);
    if (round.is_discarded() || !round.is_object() || round.value("success", false))
      continue;
    // The latest of the workers' last rounds (ISO timestamps sort in time order).
    auto when = round.value("timestamp", "");
    if (!out.where.empty() && when < latest)
      continue;
    latest = when;
    out.where = name.substr(0, 6) + " " + name.substr(7) + ", round " + std::to_string(last);
    auto so = round.value("stdout", ""), se = round.value("stderr", "");
    out.line = telling_line(so, se);
    auto all = trimmed(so + (so.empty() || se.empty() ? "" : "\n") + se);
    out.output = all.size() > 1500 ? "..." + all.substr(all.size() - 1500) : all;
  }
  return out;
}

std::string provider_advice(const std::string& reason) {
  std::vector<std::string> steps;
  if (reason.find("is not configured for model") != std::string::npos)
    steps.push_back("--llm-provider names a provider KernelAgent does not use for this model: "
                    "leave it out, or name one of the allowed providers");
  if (reason.find("RelayProvider") != std::string::npos)
    steps.push_back("KernelAgent sends a model it does not know to its relay at LLM_RELAY_URL "
                    "(default http://127.0.0.1:11434): start the relay, or give its address "
                    "with --llm-base-url");
  if (reason.find("OpenAIProvider") != std::string::npos)
    steps.push_back("set OPENAI_API_KEY in the environment (and --llm-base-url for an "
                    "OpenAI-compatible server)");
  if (reason.find("AnthropicProvider") != std::string::npos)
    steps.push_back("set ANTHROPIC_API_KEY in the environment");
  steps.push_back("choose the model with --llm-model (KernelAgent's default is $OPENAI_MODEL, "
                  "else claude-sonnet-4-20250514)");
  std::string out = "To fix: ";
  for (size_t i = 0; i < steps.size(); ++i)
    out += (i ? "; " : "") + steps[i];
  return out + ".";
}

namespace {

// A fresh folder in /tmp for one check's files, removed with the object; empty `path` when none
// could be made.
struct check_folder {
  fs::path path;
  explicit check_folder(const std::string& prefix) {
    std::string name = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(name.data()))
      path = name;
  }
  ~check_folder() {
    std::error_code ec;
    if (!path.empty())
      fs::remove_all(path, ec);
  }
};

} // namespace

std::string check_kernel_agent(const kernel_agent_config& cfg, agent_provider& found) {
  auto adapter = adapter_of(cfg);
  if (!fs::exists(adapter))
    return "the KernelAgent adapter " + adapter + " is missing (it is built beside bbcluster)";
  check_folder dir("bbcluster-agent-check");
  if (dir.path.empty())
    return std::string("cannot make a folder in /tmp for the KernelAgent check");
  auto settings = (dir.path / "settings.json").string();
  auto said_path = (dir.path / "check.log").string();
  std::string why = write_file_atomically(settings, agent_settings(cfg).dump(2));
  process_result r;
  if (why.empty())
    r = run_process({cfg.python, adapter, "--check", settings}, said_path, 120);
  auto said = trimmed(read_text(said_path));
  if (!why.empty())
    return why;
  if (r.ok()) {
    // The adapter's answer: "bbcluster-provider", model, provider and URL, tab-separated.
    std::istringstream lines(said);
    std::string answer;
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("bbcluster-provider\t", 0) == 0)
        answer = line.substr(19);
    std::istringstream fields(answer);
    std::getline(fields, found.model, '\t');
    std::getline(fields, found.provider, '\t');
    std::getline(fields, found.base_url);
    return "";
  }
  if (r.status == 3 && !said.empty())
    return last_lines(said, 1);
  if (r.status == 5 && !said.empty()) {
    auto reason = last_lines(said, 1);
    return reason + " " + provider_advice(reason);
  }
  return "cannot run " + cfg.python + " " + adapter + " --check: " + r.how
         + (said.empty() ? "" : ": " + last_lines(said, 3));
}

std::string check_agent_service(const kernel_agent_config& cfg, const std::string& op) {
  static const char* probe = R"PY(
import sys
sys.path.insert(0, sys.argv[1])
try:
    from bbcluster_client import Client
except ImportError as e:
    print(f"{sys.executable} cannot use the bbcluster client: {e} (pip install pyzmq msgpack)")
    sys.exit(3)
try:
    with Client(sys.argv[2], keys=sys.argv[3] or None, name="kernel_agent-check", timeout=15) as c:
        r = c.evaluate(sys.argv[4], None, suite=sys.argv[5], data=sys.argv[6] or None, topn=1,
                       timeout=120)
        print("bbcluster-service", c.welcome.get("slots"), c.welcome.get("device"), r.outcome)
except Exception as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(4)
)PY";
  check_folder dir("bbcluster-agent-service");
  if (dir.path.empty())
    return std::string("cannot make a folder in /tmp for the service check");
  auto said_path = (dir.path / "check.log").string();
  auto r = run_process({cfg.python, "-c", probe, cfg.service.client_path, cfg.service.address, cfg.service.keys,
                        op, cfg.service.suite, cfg.service.data},
                       said_path, 180);
  auto said = trimmed(read_text(said_path));
  if (r.ok())
    return "";
  return "kernel_agent.verify_with = " + cfg.service.address + ": KernelAgent's Python " + cfg.python
         + " cannot reach the bbcluster service: " + (said.empty() ? r.how : last_lines(said, 2));
}

// What the adapter's result file says went wrong ("error"; python/bbcluster_kernel_agent.py).
BB_NAMED_ENUM(agent_error,
  /// triton_kernel_agent (or a package it needs) is not installed: not worth asking again.
  missing_package,
  /// The provider or model is not set up (a key, a model name): not worth asking again.
  configuration,
  /// The agent raised: worth asking again.
  exception);

author_reply run_kernel_agent(const kernel_agent_config& cfg, const author_request& req,
                              const std::function<void(double)>& sleep) {
  author_reply out;
  out.kind = kernel_kind::py;
  auto started = std::chrono::steady_clock::now();
  auto stem = fs::path(req.log_dir) / (req.op.folder + "_v" + std::to_string(req.version));
  auto request_path = stem.string() + ".request.json";
  auto result_path = stem.string() + ".result.json";
  auto log_path = stem.string() + ".log";
  // The agent's own files (its logs, its session until the run folder takes it) go into a
  // folder of this operator and version alone, so that no two runs share a log.
  auto request = agent_settings(cfg);
  request["problem_description"] = agent_problem_description(req.op, req.feedback);
  request["test_code"] = agent_test_code(req.op, req.previous, cfg.service);
  request["log_dir"] = stem.string();
  request["op_name"] = req.op.op_name;
  request["version"] = req.version;
  if (auto err = write_file_atomically(request_path, request.dump(2)); !err.empty()) {
    out.why = err;
    return out;
  }
  for (uint32_t run = 0;; ++run) {
    std::error_code ec;
    fs::remove(result_path, ec);
    ++out.tries;
    auto r = run_process({cfg.python, adapter_of(cfg), request_path, result_path}, log_path,
                         cfg.timeout_s);
    auto result = json::parse(read_text(result_path), nullptr, false);
    bool have_result = !result.is_discarded() && result.is_object();
    std::string failure;
    out.transient = false;
    if (r.timed_out) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.0f", cfg.timeout_s);
      failure = std::string("the agent did not finish within ") + buf + " s (killed)";
      out.transient = true;
    } else if (have_result && result.contains("error")) {
      auto kind = parse_enum<agent_error>(result.value("error", ""));
      auto message = result.value("message", "");
      if (kind == agent_error::missing_package)
        failure = message.empty() ? "triton_kernel_agent is missing" : message;
      else if (kind == agent_error::configuration)
        failure = message + " " + provider_advice(message);
      else
        failure = "the agent raised " + (message.empty() ? "an exception" : message);
      out.transient = kind == agent_error::exception;
    } else if (!have_result) {
      failure = "the agent process " + r.how + " without a result";
      out.transient = true;
    }
    if (failure.empty()) {
      out.session_dir = result.value("session_dir", "");
      std::ostringstream note;
      note << "agent";
      if (!cfg.model.empty())
        note << " (" << cfg.model << ")";
      if (result.contains("worker_id") && !result["worker_id"].is_null())
        note << " worker " << result["worker_id"].dump();
      if (result.contains("rounds") && !result["rounds"].is_null())
        note << ", " << result["rounds"].dump() << " rounds";
      if (out.tries > 1)
        note << ", " << out.tries << " runs";
      out.note = note.str();
      auto code = result.value("kernel_code", "");
      if (result.value("success", false) && !code.empty()) {
        out.code = expose_entry_point(code, req.op.folder);
      } else {
        auto message = result.value("message", "");
        out.why = "KernelAgent found no kernel (" + (message.empty() ? "no message" : message)
                  + ")";
        auto last = out.session_dir.empty() ? round_failure{} : last_round_failure(out.session_dir);
        if (!last.where.empty())
          out.why += "; its last round (" + last.where + ") failed: " + last.line
                     + "\nThe output of that round:\n" + last.output;
      }
      break;
    }
    out.why = failure + " (log: " + log_path + ")";
    if (!out.transient || run >= cfg.max_retries)
      break;
    sleep(cfg.backoff_s * static_cast<double>(1u << run));
  }
  remove_leftovers(stem);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

} // namespace bb
