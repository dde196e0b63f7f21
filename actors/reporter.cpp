#include "actors/reporter.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "results/profile.hpp"
#include "results/reports.hpp"
#include "results/scoring.hpp"
#include "messages/errors.hpp"

namespace bb {

caf::error validate(const reporter_config& cfg) {
  if (cfg.p <= 0)
    return make_error(errc::bad_config, "reporter: p must be positive");
  return {};
}

namespace {

std::string summarize(const eval_result& r) {
  if (r.outcome != outcome::ok)
    return to_string(r.outcome) + (r.detail.empty() ? "" : ": " + r.detail);
  auto s = score_result(r);
  if (s.skipped)
    return "skipped: " + s.skip_reason.substr(0, s.skip_reason.find('\n'));
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%zu/%zu correct, speedup %.2fx", s.passed_inputs,
                s.correctness_inputs, s.performance);
  return buf;
}

// A job that did not run its inputs; an op this torch lacks is skipped, not failed.
bool failed_as_a_whole(const eval_result& r) {
  return fails_job(r.outcome);
}

} // namespace

reporter_actor::behavior_type reporter(reporter_pointer self, reporter_config cfg) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return reporter_actor::behavior_type::make_empty_behavior();
  }
  if (!cfg.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.log_dir, ec);
    auto path = cfg.log_dir + "/results.jsonl";
    if (ec || !self->state.journal.open(path)) {
      self->quit(make_error(errc::io_error, "reporter: cannot open journal " + path + ": "
                                              + (ec ? ec.message() : std::strerror(errno))));
      return reporter_actor::behavior_type::make_empty_behavior();
    }
  }
  for (auto& r : cfg.previous)
    self->state.failed_jobs += failed_as_a_whole(r) ? 1 : 0;
  self->state.results = std::move(cfg.previous);
  cfg.previous.clear();
  self->state.cfg = std::move(cfg);
  return {
    [=](atom::result, eval_result& r) {
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r))
        spdlog::error("reporter: cannot append to {}/results.jsonl", st.cfg.log_dir);
      st.failed_jobs += failed_as_a_whole(r) ? 1 : 0;
      if (r.version > 0)
        spdlog::info("reporter: [{}/{}] {} final version {}: {}", st.results.size() + 1,
                     st.cfg.expected_jobs, r.op_name, r.version, summarize(r));
      else
        spdlog::info("reporter: [{}/{}] {} attempt {}: {}", st.results.size() + 1,
                     st.cfg.expected_jobs, r.op_name, r.attempt, summarize(r));
      st.results.push_back(std::move(r));
    },
    [=](atom::requeue, const eval_result& r) {
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r, "job_requeued"))
        spdlog::error("reporter: cannot append to {}/results.jsonl", st.cfg.log_dir);
    },
    [=](atom::revise, const eval_result& r) {
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r, "version_evaluated"))
        spdlog::error("reporter: cannot append to {}/results.jsonl", st.cfg.log_dir);
      spdlog::info("reporter: {} version {}: {}", r.op_name, r.version, summarize(r));
    },
    [=](atom::finish) -> sweep_report {
      auto& st = self->state;
      auto s = score_results(st.results, st.cfg.p);
      spdlog::info("reporter: {}", outcome_line(st.results));
      sweep_report report;
      report.scores_text = format_scores(s) + format_skipped(s);
      report.jobs = st.results.size();
      report.failed_jobs = st.failed_jobs;
      auto profile = make_profile(st.results);
      report.profile_text = format_profile(profile);
      if (!st.cfg.log_dir.empty()) {
        if (auto err = write_file_atomically(std::filesystem::path(st.cfg.log_dir) / "profile.json",
                                             profile_json(profile).dump(2));
            !err.empty())
          spdlog::error("reporter: {}", err);
        auto err = write_reports(st.cfg.log_dir, st.cfg.command, st.results, s);
        if (!err.empty())
          spdlog::error("reporter: {}", err);
        else
          report.log_dir = st.cfg.log_dir;
      }
      return report;
    },
  };
}

} // namespace bb
