#pragma once

// report.html: one self-contained page of a run (no network, no external script or font):
// the three scores, a sortable, filterable table of operators, a log-scale chart of their
// speedups and a histogram of outcomes in inline SVG, and for generative campaigns each
// operator's versions. While the sweep runs it reloads itself. No actors here.

#include <map>
#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// Where the sweep is when the page is written.
enum class run_phase { running, stopped, finished };

struct report_page {
  /// The command line.
  std::string command;
  run_phase phase = run_phase::running;
  /// Operators the sweep will report in all.
  size_t ops_total = 0;
  double p = 1.0;
  /// Each finished operator's result.
  std::vector<eval_result> results;
  /// A generative campaign's evaluated versions, per operator, in order.
  std::map<std::string, std::vector<eval_result>> versions;
  /// Folder of the kernels (the directory backend's, a campaign's run folder), as a link
  /// target relative to the page; empty: no kernel links.
  std::string kernel_dir;
  /// Seconds between reloads while running.
  int reload_s = 10;
  /// How to go on after a stop (shown when stopped).
  std::string resume_command;
  /// Selected operators the backend does not implement, with why: named under the scores.
  std::map<std::string, std::string> not_evaluated;
  /// What every operator was evaluated with (sweep.json's conditions): stated once, under
  /// the operators.
  std::map<std::string, std::string> conditions;
};

/// A speedup and its 95% interval: the geometric mean of an operator's per-input speedups
/// (failed inputs count as 1.0, as in the score) with exp(mean +- 1.96 sd / sqrt(n)) of the
/// logs; the interval is the point itself for fewer than two inputs.
struct speedup_interval {
  double geomean = 1.0;
  double low = 1.0;
  double high = 1.0;
  size_t inputs = 0;
};

speedup_interval speedup_of(const std::vector<performance_record>& performance);

/// The page; `written_at` is shown as the time of writing (UTC text).
std::string render_report_html(const report_page& page, const std::string& written_at);

/// The current time as "2026-12-04 16:20:01 UTC".
std::string utc_now_text();

/// Text made safe inside HTML elements and attribute values.
std::string html_escape(const std::string& text);

} // namespace bb
