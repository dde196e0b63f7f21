// Wiring of the generative backends (llm, kernel_agent) for bbcluster: settings into the
// authors' configurations, the checks a user should hear about before a campaign starts,
// the run folder, and the actors.

#include <cstdlib>
#include <filesystem>

#include <caf/actor_system.hpp>
#include <spdlog/spdlog.h>

#include "actors/authors.hpp"
#include "actors/generative_generator.hpp"
#include "generate/http.hpp"
#include "programs/cli.hpp"

namespace bb::program {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

llm_config make_llm_config(const settings& s) {
  llm_config c;
  c.provider = s.llm_provider;
  c.base_url = s.llm_base_url;
  if (c.base_url.empty() && c.provider == "openai")
    c.base_url = env("OPENAI_BASE_URL");
  if (c.base_url.empty())
    c.base_url = default_base_url(c.provider);
  c.model = s.llm_model;
  c.api_key = env(api_key_variable(c.provider));
  from_string(s.llm_dsl, c.dsl);
  c.request_timeout_s = s.llm_timeout_s;
  c.max_retries = static_cast<uint32_t>(s.llm_max_retries);
  c.backoff_s = s.llm_backoff_s;
  c.max_backoff_s = s.llm_max_backoff_s;
  c.max_tokens = static_cast<uint32_t>(s.llm_max_tokens);
  c.temperature = s.llm_temperature;
  return c;
}

kernel_agent_config make_agent_config(const settings& s) {
  kernel_agent_config c;
  c.python = !s.ka_python.empty() ? s.ka_python : !build_python().empty() ? build_python() : "python3";
  c.workers = static_cast<uint32_t>(s.ka_workers);
  c.max_rounds = static_cast<uint32_t>(s.ka_max_rounds);
  c.timeout_s = s.ka_timeout_s;
  c.max_retries = static_cast<uint32_t>(s.ka_max_retries);
  c.backoff_s = s.ka_backoff_s;
  c.model = s.llm_model;
  c.provider = s.ka_provider;
  c.base_url = s.llm_base_url;
  c.generate_default_test = s.ka_generate_default_test;
  c.service.address = s.ka_verify_with;
  c.service.keys = s.ka_verify_keys;
  c.service.client_path = beside_program("python-client");
  return c;
}

} // namespace

std::string prepare_generative(const flags& f, const settings& s, const sweep_plan& plan,
                               const std::string& run_dir, const std::string& command,
                               const resumed_sweep& resumed, generative_plan& out) {
  settings_lines lines = {{"suite", f.suite},
                          {"attempts per operator", std::to_string(s.attempts)},
                          {"another version when correct but not faster than p",
                           s.improve_when_slow ? "yes" : "no"},
                          {"p", number(s.p)},
                          {"authors at once", std::to_string(s.authors)}};
  if (f.topn > 0)
    lines.push_back({"inputs per operator (topn)", std::to_string(f.topn)});
  double author_bound_s = 0;
  out.backend = f.backend;
  out.authors = s.authors;
  if (f.backend == "llm") {
    if (!http_available())
      return "--backend llm needs libcurl, and this bbcluster was built without it (apt install "
             "libcurl4-openssl-dev, then scripts/setup.sh)";
    auto& llm = out.llm = make_llm_config(s);
    if (auto err = check(llm); !err.empty())
      return err;
    lines.push_back({"provider", llm.provider});
    lines.push_back({"base URL", llm.base_url});
    lines.push_back({"model", llm.model});
    lines.push_back({"kernel language", to_string(llm.dsl)});
    lines.push_back({"request timeout (s)", number(llm.request_timeout_s)});
    lines.push_back({"retries", std::to_string(llm.max_retries)});
    author_bound_s = (llm.max_retries + 1.0) * (llm.request_timeout_s + llm.max_backoff_s) + 60;
  } else {
    auto& agent = out.agent = make_agent_config(s);
    agent_provider uses;
    if (auto err = check_kernel_agent(agent, uses); !err.empty())
      return err;
    spdlog::info("bbcluster: KernelAgent asks {} through its {} provider{}", uses.model,
                 uses.provider, uses.base_url.empty() ? "" : " at " + uses.base_url);
    lines.push_back({"python", agent.python});
    lines.push_back({"KernelAgent model", uses.model});
    lines.push_back({"KernelAgent provider", uses.provider
                                               + (uses.base_url.empty() ? "" : " at " + uses.base_url)});
    lines.push_back({"KernelAgent writes its own test too",
                     agent.generate_default_test ? "yes" : "no"});
    if (!agent.service.address.empty()) {
      std::error_code ec;
      agent.service.suite = f.suite;
      agent.service.data = f.data.empty() ? "" : std::filesystem::absolute(f.data, ec).string();
      agent.service.topn = f.topn;
      if (!agent.service.keys.empty())
        agent.service.keys = std::filesystem::absolute(agent.service.keys, ec).string();
      if (auto err = check_agent_service(agent, plan.work.ops.empty() ? "relu" : plan.work.ops.front().op_name);
          !err.empty())
        return err;
      spdlog::info("bbcluster: KernelAgent's test runs check candidates on the bbcluster service at {}",
                   agent.service.address);
      lines.push_back({"KernelAgent's tests run on", agent.service.address});
    }
    lines.push_back({"KernelAgent workers", std::to_string(agent.workers)});
    lines.push_back({"KernelAgent max rounds", std::to_string(agent.max_rounds)});
    lines.push_back({"agent timeout (s)", number(agent.timeout_s)});
    lines.push_back({"agent retries", std::to_string(agent.max_retries)});
    author_bound_s = (agent.max_retries + 1.0) * (agent.timeout_s + 5)
                     + agent.backoff_s * ((1u << agent.max_retries) - 1) + 60;
  }
  std::vector<std::string> names;
  for (auto& op : plan.work.ops)
    names.push_back(op.op_name);
  std::string err;
  auto schemas = resolve_ops(names, s, err);
  if (!schemas)
    return "cannot look up the operators' schemas: " + err;

  auto& cfg = out.generator;
  cfg.backend = f.backend;
  cfg.policy.max_versions = static_cast<uint32_t>(s.attempts);
  cfg.policy.improve_when_slow = s.improve_when_slow;
  cfg.policy.p = s.p;
  cfg.author_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(author_bound_s));
  for (size_t i = 0; i < plan.work.ops.size(); ++i)
    cfg.ops.push_back(make_op_brief(plan.work.ops[i].op_name, (*schemas)[i],
                                    plan.work.ops[i].correctness));
  auto parent = !s.run_folder_dir.empty() ? s.run_folder_dir
                : !run_dir.empty()        ? run_dir
                                          : std::string("generated_kernels");
  cfg.restored = resumed.versions;
  auto earlier = f.resume.empty() ? std::string() : run_folder::find_latest(parent, f.backend);
  if (!earlier.empty()) {
    if (auto why = cfg.folder.reopen(earlier, f.backend, lines); !why.empty())
      return why;
  } else if (auto why = cfg.folder.create(parent, f.backend, lines, command); !why.empty()) {
    return why;
  }
  spdlog::info("bbcluster: {} kernels go to {}", f.backend, cfg.folder.path());
  return "";
}

generative_backend spawn_generative(caf::actor_system& sys, const generative_plan& plan) {
  generative_backend out;
  out.run_folder = plan.generator.folder.path();
  for (int64_t i = 0; i < plan.authors; ++i) {
    if (plan.backend == "llm")
      out.authors.push_back(sys.spawn<caf::detached>(llm_author, plan.llm));
    else
      out.authors.push_back(sys.spawn<caf::detached>(kernel_agent_author, plan.agent));
  }
  out.generator = sys.spawn(generative_generator, plan.generator, out.authors);
  return out;
}

} // namespace bb::program
