#include "actors/reporter.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "results/profile.hpp"
#include "results/report_html.hpp"
#include "results/reports.hpp"
#include "results/resume.hpp"
#include "results/scoring.hpp"
#include "messages/errors.hpp"
#include "suite/shards.hpp"

namespace bb {

caf::error validate(const reporter_config& cfg) {
  if (cfg.p <= 0)
    return make_error(errc::bad_config, "reporter: p must be positive");
  if (!(cfg.reports_interval_s >= 0 && cfg.reports_interval_s <= 86400))
    return make_error(errc::bad_config, "reporter: reports_interval_s must be in [0, 86400]");
  return {};
}

namespace {

// Adds the CPU time of the handler it lives in to the reporter's own: its thread's CPU clock
// at the start and the end, right on any scheduler (detached, the thread is the reporter's).
class cpu_meter {
public:
  explicit cpu_meter(reporter_pointer self)
    : total_(self->state.profile.reporter.cpu_seconds), start_(thread_cpu_seconds()) {
  }
  cpu_meter(const cpu_meter&) = delete;
  cpu_meter& operator=(const cpu_meter&) = delete;
  ~cpu_meter() {
    settle();
  }

  /// Adds the time so far, and goes on from now.
  void settle() {
    auto now = thread_cpu_seconds();
    total_ += now - start_;
    start_ = now;
  }

private:
  double& total_;
  double start_;
};

// A job that did not run its inputs; an op this torch lacks is skipped, not failed.
bool failed_as_a_whole(const eval_result& r) {
  return fails_job(r.outcome);
}

// Failed writes, a line per file, each logged; the lines.
std::vector<std::string> log_failed_writes(const std::string& errors) {
  std::vector<std::string> out;
  std::istringstream lines(errors);
  for (std::string line; std::getline(lines, line);) {
    spdlog::error("reporter: {}", line);
    out.push_back(line);
  }
  return out;
}

// Writes the sweep's records now lack: logged, and told to the board, which makes the sweep
// end non-zero naming them.
void lost_writes(reporter_pointer self, const std::string& errors) {
  for (auto& line : log_failed_writes(errors))
    if (self->state.cfg.board)
      self->state.cfg.board->write_failed(line);
}

void write_html(reporter_pointer self, run_phase phase) {
  auto& st = self->state;
  report_page page;
  page.command = st.cfg.command;
  page.phase = phase;
  page.ops_total = st.cfg.expected_jobs;
  page.p = st.cfg.p;
  page.results = st.results;
  page.versions = st.versions;
  page.kernel_dir = st.cfg.kernel_dir;
  page.reload_s = st.cfg.reload_s;
  page.not_evaluated = st.cfg.not_evaluated;
  page.conditions = st.cfg.conditions;
  page.resume_command = resume_command_for(st.cfg.log_dir);
  auto path = std::filesystem::path(st.cfg.log_dir) / "report.html";
  auto text = render_report_html(page, utc_now_text());
  // While running, a failed write is replaced by the next; the last one must stand.
  if (phase == run_phase::running)
    log_failed_writes(write_file_atomically(path, text));
  else
    lost_writes(self, write_final_file(path, text));
}

// One operator's record, as its result arrives: O(1), not paced.
void write_record(reporter_pointer self, const eval_result& r) {
  auto& st = self->state;
  auto versions = st.versions.find(r.op_name);
  lost_writes(self, write_operator_record(st.cfg.log_dir, r, versions == st.versions.end()
                                                                ? std::vector<eval_result>{}
                                                                : versions->second));
}

// The reports that grow, with every operator in so far: O(N), so at the pace's times only.
void rewrite_growing(reporter_pointer self) {
  auto& st = self->state;
  auto start = report_pace::clock::now();
  report_status status{true, true, st.cfg.expected_jobs, "", st.cfg.not_evaluated, st.cfg.conditions};
  // Rewritten while running and at the end: a failure here is logged, not kept.
  log_failed_writes(write_growing_reports(st.cfg.log_dir, st.cfg.command, st.results,
                                          score_results(st.results, st.cfg.p), status));
  write_html(self, run_phase::running);
  auto took = report_pace::clock::now() - start;
  st.pace.rewritten(self->clock().now(), took);
  ++st.profile.reporter.rewrites;
  st.profile.reporter.rewrite_seconds += std::chrono::duration<double>(took).count();
}

// A change the growing reports must show: rewritten now when their time has come, else by
// the tick armed for that time.
void show_soon(reporter_pointer self) {
  auto& st = self->state;
  if (st.closed || st.cfg.log_dir.empty())
    return;
  auto now = self->clock().now();
  if (st.pace.due(now))
    rewrite_growing(self);
  else if (auto wait = st.pace.arm_tick(now))
    self->delayed_send(self, *wait, atom::tick_v);
}

// Every report: complete, or partial after a stop.
sweep_report write_all(reporter_pointer self, bool stopped, cpu_meter& meter) {
  auto& st = self->state;
  st.closed = true;
  auto s = score_results(st.results, st.cfg.p);
  spdlog::info("reporter: {}", outcome_line(st.results));
  sweep_report report;
  report.scores_text = format_scores(s) + format_skipped(s);
  report.jobs = st.results.size();
  report.failed_jobs = st.failed_jobs;
  report.partial = stopped;
  auto& profile = st.profile;
  std::string profile_file;
  // profile.json comes before the final reports, as ever: the reporter's CPU in it, and in
  // the profile's text, counts up to here, without their one pass.
  meter.settle();
  if (!st.cfg.log_dir.empty()) {
    auto err = write_final_file(std::filesystem::path(st.cfg.log_dir) / "profile.json",
                                profile_json(profile).dump(2));
    lost_writes(self, err);
    if (err.empty())
      profile_file = "profile.json";
    report_status status{stopped, false, st.cfg.expected_jobs, resume_command_for(st.cfg.log_dir),
                         st.cfg.not_evaluated, st.cfg.conditions};
    err = write_reports(st.cfg.log_dir, st.cfg.command, st.results, s, status);
    write_html(self, stopped ? run_phase::stopped : run_phase::finished);
    lost_writes(self, err);
    if (err.empty())
      report.log_dir = st.cfg.log_dir;
  }
  report.profile_text = format_profile(profile, profile_file);
  return report;
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
  cpu_meter meter{self};
  for (auto& r : cfg.previous) {
    self->state.failed_jobs += failed_as_a_whole(r) ? 1 : 0;
    add_to_profile(self->state.profile, r);
  }
  self->state.results = std::move(cfg.previous);
  self->state.versions = std::move(cfg.previous_versions);
  cfg.previous.clear();
  cfg.previous_versions.clear();
  self->state.cfg = std::move(cfg);
  self->state.pace = report_pace(std::chrono::duration_cast<report_pace::clock::duration>(
    std::chrono::duration<double>(self->state.cfg.reports_interval_s)));
  // A page to open from the first second on.
  if (!self->state.cfg.log_dir.empty())
    write_html(self, run_phase::running);
  return {
    [=](atom::result, eval_result& r) {
      cpu_meter meter{self};
      auto& st = self->state;
      ++st.profile.reporter.results;
      if (st.journal.is_open() && !st.journal.append(r))
        lost_writes(self, st.journal.error());
      st.failed_jobs += failed_as_a_whole(r) ? 1 : 0;
      // A merged result's time is its shards', profiled as they came.
      if (r.shards == 0)
        add_to_profile(st.profile, r);
      if (r.version > 0)
        spdlog::info("reporter: [{}/{}] {} final version {}: {}", st.results.size() + 1,
                     st.cfg.expected_jobs, r.op_name, r.version, summarize(r));
      else
        spdlog::info("reporter: [{}/{}] {} attempt {}: {}", st.results.size() + 1,
                     st.cfg.expected_jobs, r.op_name, r.attempt, summarize(r));
      st.results.push_back(std::move(r));
      if (st.cfg.board)
        st.cfg.board->finished(st.results.back());
      if (st.cfg.on_result)
        st.cfg.on_result(st.results.back());
      if (!st.cfg.log_dir.empty())
        write_record(self, st.results.back());
      st.pace.changed();
      show_soon(self);
    },
    [=](atom::shard, const eval_result& r) {
      cpu_meter meter{self};
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r, "shard_finished"))
        lost_writes(self, st.journal.error());
      add_to_profile(st.profile, r);
      if (st.cfg.board)
        st.cfg.board->shard_finished(r);
      spdlog::debug("reporter: {} {}: {}", r.op_name, span_text(r.shard), summarize(r));
    },
    [=](atom::requeue, const eval_result& r) {
      cpu_meter meter{self};
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r, "job_requeued"))
        lost_writes(self, st.journal.error());
    },
    [=](atom::revise, const eval_result& r) {
      cpu_meter meter{self};
      auto& st = self->state;
      if (st.journal.is_open() && !st.journal.append(r, "version_evaluated"))
        lost_writes(self, st.journal.error());
      spdlog::info("reporter: {} version {}: {}", r.op_name, r.version, summarize(r));
      auto& list = st.versions[r.op_name];
      auto same = std::find_if(list.begin(), list.end(),
                               [&](const eval_result& x) { return x.version == r.version; });
      if (same != list.end())
        *same = r;
      else
        list.push_back(r);
    },
    [=](atom::tick) {
      cpu_meter meter{self};
      self->state.pace.ticked();
      show_soon(self);
    },
    [=](atom::finish) {
      cpu_meter meter{self};
      return write_all(self, false, meter);
    },
    [=](atom::stop) {
      cpu_meter meter{self};
      return write_all(self, true, meter);
    },
  };
}

} // namespace bb
