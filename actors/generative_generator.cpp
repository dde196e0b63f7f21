#include "actors/generative_generator.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "artefacts/kernel_dir.hpp"
#include "results/scoring.hpp"
#include "messages/errors.hpp"

namespace bb {

caf::error validate(const generative_config& cfg) {
  if (cfg.backend.empty())
    return make_error(errc::bad_config, "generative_generator: no backend name");
  if (cfg.folder.path().empty())
    return make_error(errc::bad_config, "generative_generator: no run folder");
  if (cfg.policy.max_versions < 1)
    return make_error(errc::bad_config, "generative_generator: --llm-attempts must be >= 1");
  return {};
}

namespace {

void write_summaries(generative_pointer self, const op_campaign& c) {
  auto& st = self->state;
  if (auto err = st.folder.write_op_summary(c.summary); !err.empty())
    spdlog::error("generative_generator: {}", err);
}

void write_overall(generative_pointer self) {
  auto& st = self->state;
  std::vector<op_summary> all;
  for (auto& [name, c] : st.ops)
    all.push_back(c.summary);
  if (auto err = st.folder.write_overall(all); !err.empty())
    spdlog::error("generative_generator: {}", err);
}

// Files the author's answer as the next version of its operator: the kernel file in the run
// folder (or why there is none) and the agent's session.
artefact file_version(generative_pointer self, const author_request& req, author_reply& reply) {
  auto& st = self->state;
  auto& c = st.ops.at(req.op.op_name);
  version_record rec;
  rec.version = req.version;
  rec.author_note = reply.note;
  rec.author_seconds = reply.seconds;
  artefact a;
  a.kind = kernel_kind::none;
  a.why_none = "v" + std::to_string(req.version) + ": " + reply.why;
  if (!reply.session_dir.empty()) {
    std::string err;
    auto kept = st.folder.preserve_session(req.op.folder, reply.session_dir, err);
    if (kept.empty())
      spdlog::warn("generative_generator: {}: {}", req.op.op_name, err);
    else
      c.summary.sessions.push_back(kept);
  }
  c.last_code = reply.code;
  if (!reply.code.empty()) {
    std::string err;
    auto path = st.folder.write_version(req.op.folder, req.version, reply.kind, reply.code, err);
    if (path.empty()) {
      a.why_none = "v" + std::to_string(req.version) + ": " + err;
    } else {
      rec.file = std::filesystem::path(path).filename().string();
      artefact k;
      if (auto why = read_kernel_file(path, req.op.folder, k); why.empty())
        a = k;
      else
        a.why_none = "v" + std::to_string(req.version) + " (" + rec.file + "): " + why;
    }
  }
  rec.verdict = a.kind == kernel_kind::none ? "no kernel: " + a.why_none : "being evaluated";
  c.summary.versions.push_back(rec);
  write_summaries(self, c);
  spdlog::info("generative_generator: {} v{} {} in {:.1f} s{}", req.op.op_name, req.version,
               a.kind == kernel_kind::none ? "has no kernel" : "written", reply.seconds,
               a.kind == kernel_kind::none ? ": " + reply.why : "");
  return a;
}

void dispatch(generative_pointer self) {
  auto& st = self->state;
  while (!st.idle.empty() && !st.waiting.empty()) {
    auto author = st.idle.back();
    st.idle.pop_back();
    auto job = std::move(st.waiting.front());
    st.waiting.pop_front();
    auto req = job.req;
    auto deliver = job.deliver;
    auto done = [=](author_reply reply) {
      self->state.idle.push_back(author);
      deliver(file_version(self, req, reply));
      dispatch(self);
    };
    self->request(author, st.cfg.author_timeout, atom::write_v, req)
      .then([=](author_reply& reply) { done(std::move(reply)); },
            [=](caf::error& err) {
              author_reply reply;
              reply.why = "the author did not answer: " + describe(err);
              done(std::move(reply));
            });
  }
}

// Asks for the next version of an operator; `previous` is the evaluation of the last one
// (none for v1), `feedback` what it says to the author.
void ask_for_version(generative_pointer self, op_campaign& c, const eval_result* previous,
                     const std::string& feedback, std::function<void(artefact)> deliver) {
  auto& st = self->state;
  author_request req;
  req.op = c.brief;
  req.version = ++c.versions_asked;
  req.feedback = feedback;
  if (previous)
    req.previous = *previous;
  req.log_dir = st.folder.agent_logs();
  st.waiting.push_back({std::move(req), std::move(deliver)});
  dispatch(self);
}

std::string why_final(const eval_result& standing, const op_campaign& c, const version_policy& p);

// Decides an operator whose versions are done: the version that stands, and why.
const eval_result& conclude(op_campaign& c, const version_policy& policy) {
  const auto& standing = c.history.standing();
  c.summary.status = is_correct_result(standing)       ? "passed"
                     : score_result(standing).skipped ? "skipped"
                                                      : "failed";
  c.summary.final_version = standing.version;
  c.summary.why = why_final(standing, c, policy);
  return standing;
}

// Takes up what an interrupted campaign left of an operator: its evaluated versions (from the
// journal), their files and sessions (from the run folder).
void restore(const run_folder& folder, op_campaign& c, const std::vector<eval_result>& versions,
             const version_policy& policy) {
  for (auto& r : versions) {
    c.history.record(r);
    version_record rec;
    rec.version = r.version;
    rec.verdict = result_line(r);
    rec.author_note = "before the resume";
    auto file = folder.version_file(c.brief.folder, r.version);
    if (!file.empty())
      rec.file = std::filesystem::path(file).filename().string();
    c.summary.versions.push_back(rec);
    c.versions_asked = std::max(c.versions_asked, r.version);
  }
  auto last = folder.version_file(c.brief.folder, c.versions_asked);
  if (!last.empty()) {
    std::ifstream in(last, std::ios::binary);
    std::stringstream code;
    code << in.rdbuf();
    c.last_code = code.str();
  }
  c.summary.sessions = folder.sessions_of(c.brief.folder);
  if (!c.history.wants_another(policy))
    conclude(c, policy);
}

std::string why_final(const eval_result& standing, const op_campaign& c, const version_policy& p) {
  auto line = result_line(standing);
  auto n = c.history.versions().size();
  if (is_correct_result(standing))
    return line + (n > 1 ? " (after " + std::to_string(n) + " versions)" : "");
  if (score_result(standing).skipped)
    return "left out of the scores, as it cannot run here: " + line;
  return "no correct version in " + std::to_string(n) + " of " + std::to_string(p.max_versions)
         + " attempts; the last: " + line;
}

} // namespace

generator_actor::behavior_type generative_generator(generative_pointer self, generative_config cfg,
                                                    std::vector<author_actor> authors) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return generator_actor::behavior_type::make_empty_behavior();
  }
  auto& st = self->state;
  st.folder = cfg.folder;
  for (auto& b : cfg.ops) {
    op_campaign c;
    c.brief = b;
    c.summary.op_name = b.op_name;
    c.summary.folder = b.folder;
    if (auto r = cfg.restored.find(b.op_name); r != cfg.restored.end())
      restore(st.folder, c, r->second, cfg.policy);
    st.ops.emplace(b.op_name, std::move(c));
  }
  for (auto& [name, c] : st.ops)
    if (!c.summary.versions.empty())
      write_summaries(self, c);
  st.cfg = std::move(cfg);
  st.idle = std::move(authors);
  write_overall(self);
  return {
    [=](atom::generate, const std::string& op_name) -> caf::typed_response_promise<artefact> {
      auto rp = self->make_response_promise<artefact>();
      auto it = self->state.ops.find(op_name);
      if (it == self->state.ops.end()) {
        rp.deliver(make_error(errc::bad_input, "generative_generator: unknown operator " + op_name));
        return rp;
      }
      // A resumed operator goes on from its last evaluated version, with its feedback.
      auto& c = it->second;
      const auto* last = c.history.versions().empty() ? nullptr : &c.history.versions().back();
      auto feedback = last ? describe_for_feedback(*last, c.last_code, self->state.cfg.policy.p)
                           : std::string();
      ask_for_version(self, c, last, feedback,
                      [rp](artefact a) mutable { rp.deliver(std::move(a)); });
      return rp;
    },
    [=](atom::revise, eval_result& r) -> caf::typed_response_promise<generation_step> {
      auto rp = self->make_response_promise<generation_step>();
      auto& st = self->state;
      auto it = st.ops.find(r.op_name);
      if (it == st.ops.end()) {
        rp.deliver(make_error(errc::bad_input, "generative_generator: unknown operator " + r.op_name));
        return rp;
      }
      auto& c = it->second;
      for (auto& v : c.summary.versions)
        if (v.version == r.version)
          v.verdict = result_line(r);
      c.history.record(r);
      if (c.history.wants_another(st.cfg.policy)) {
        write_summaries(self, c);
        auto feedback = describe_for_feedback(r, c.last_code, st.cfg.policy.p);
        ask_for_version(self, c, &r, feedback, [rp](artefact a) mutable {
          generation_step step;
          step.final = false;
          step.next = std::move(a);
          rp.deliver(std::move(step));
        });
        return rp;
      }
      const auto& standing = conclude(c, st.cfg.policy);
      write_summaries(self, c);
      write_overall(self);
      generation_step step;
      step.result = standing;
      rp.deliver(std::move(step));
      return rp;
    },
  };
}

} // namespace bb
