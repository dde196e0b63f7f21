#include "generate/kernel_agent.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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

} // namespace

std::string check_kernel_agent(const kernel_agent_config& cfg) {
  auto adapter = adapter_of(cfg);
  if (!fs::exists(adapter))
    return "the KernelAgent adapter " + adapter + " is missing (it is built beside bbcluster)";
  char tmpl[] = "/tmp/bbcluster-agent-check-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd >= 0)
    ::close(fd);
  auto r = run_process({cfg.python, adapter, "--check"}, tmpl, 120);
  auto said = read_text(tmpl);
  std::remove(tmpl);
  if (r.ok())
    return "";
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r'))
    said.pop_back();
  if (r.status == 3 && !said.empty())
    return last_lines(said, 1);
  return "cannot run " + cfg.python + " " + adapter + " --check: " + r.how
         + (said.empty() ? "" : ": " + last_lines(said, 3));
}

author_reply run_kernel_agent(const kernel_agent_config& cfg, const author_request& req,
                              const std::function<void(double)>& sleep) {
  author_reply out;
  out.kind = "py";
  auto started = std::chrono::steady_clock::now();
  auto stem = fs::path(req.log_dir) / (req.op.folder + "_v" + std::to_string(req.version));
  auto request_path = stem.string() + ".request.json";
  auto result_path = stem.string() + ".result.json";
  auto log_path = stem.string() + ".log";
  json request = {{"problem_description", agent_problem_description(req.op, req.feedback)},
                  {"test_code", agent_test_code(req.op)},
                  {"log_dir", req.log_dir},
                  {"num_workers", cfg.workers},
                  {"max_rounds", cfg.max_rounds},
                  {"op_name", req.op.op_name},
                  {"version", req.version}};
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
      failure = result.value("error", "") == "missing_package"
                  ? result.value("message", "triton_kernel_agent is missing")
                  : "the agent raised " + result.value("message", "an exception");
      out.transient = result.value("error", "") == "exception";
    } else if (!have_result) {
      failure = "the agent process " + r.how + " without a result";
      out.transient = true;
    }
    if (failure.empty()) {
      out.session_dir = result.value("session_dir", "");
      std::ostringstream note;
      note << "agent";
      if (result.contains("worker_id") && !result["worker_id"].is_null())
        note << " worker " << result["worker_id"].dump();
      if (result.contains("rounds") && !result["rounds"].is_null())
        note << ", " << result["rounds"].dump() << " rounds";
      if (out.tries > 1)
        note << ", " << out.tries << " runs";
      out.note = note.str();
      auto code = result.value("kernel_code", "");
      if (result.value("success", false) && !code.empty())
        out.code = expose_entry_point(code, req.op.folder);
      else
        out.why = "KernelAgent found no kernel: "
                  + (result.value("message", "").empty() ? std::string("no message")
                                                         : result.value("message", ""));
      break;
    }
    out.why = failure + " (log: " + log_path + ")";
    if (!out.transient || run >= cfg.max_retries)
      break;
    sleep(cfg.backoff_s * static_cast<double>(1u << run));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

} // namespace bb
