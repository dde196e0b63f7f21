#include "results/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "results/reports.hpp"
#include "results/scoring.hpp"
#include "suite/ops.hpp"

namespace bb {

namespace {

std::string num(double x, const char* format = "%.2f") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}

// What an operator's row says of it, for the table, the chart and the histogram.
struct op_row {
  std::string name;
  std::string verdict; // correct, incorrect, skipped, or the job's outcome
  op_score score;
  speedup_interval speedup;
  size_t passed = 0, failed = 0, unscorable = 0;
  size_t perf_ran = 0, perf_failed = 0;
  std::string flags;      // the checks' flags, comma-separated; "" for none
  std::string remeasured; // inputs whose outlying speedup was measured again, both figures
  const eval_result* result = nullptr;
};

op_row row_of(const eval_result& r) {
  op_row row;
  row.name = backendbench_op_name(r.op_name);
  row.result = &r;
  row.score = score_result(r);
  row.speedup = speedup_of(r.performance);
  for (auto& c : r.correctness) {
    if (is_unscorable(c))
      ++row.unscorable;
    else if (c.is_correct)
      ++row.passed;
    else
      ++row.failed;
  }
  for (size_t i = 0; i < r.performance.size(); ++i) {
    auto& p = r.performance[i];
    (p.successfully_ran ? row.perf_ran : row.perf_failed) += 1;
    if (p.unverified_speedup > 0)
      row.remeasured += (row.remeasured.empty() ? "" : "; ") + std::string("input ")
                        + std::to_string(i) + ": " + num(p.unverified_speedup, "%.2fx")
                        + " at first, " + (p.successfully_ran ? num(p.speedup, "%.2fx") : "failed")
                        + " measured again";
  }
  for (auto& f : r.flags)
    row.flags += (row.flags.empty() ? "" : ", ") + f;
  if (r.outcome != outcome::ok)
    row.verdict = to_string(r.outcome);
  else if (row.score.skipped)
    row.verdict = "skipped";
  else
    row.verdict = row.score.correct ? "correct" : to_string(outcome::incorrect);
  return row;
}

// A row's verdict is "correct", "skipped" or an outcome's name (incorrect among them).
const char* colour_of(const std::string& verdict) {
  if (verdict == "correct")
    return "#2e7d32";
  auto o = parse_enum<outcome>(verdict);
  if (verdict == "skipped" || (o && is_skipped(*o)))
    return "#9e9e9e";
  if (o == outcome::incorrect)
    return "#ef6c00";
  return "#c62828";
}

// Per-operator speedups as columns on a log scale around 1x, fastest first.
std::string speedup_chart(std::vector<const op_row*> rows) {
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [](const op_row* r) { return r->speedup.inputs == 0; }),
             rows.end());
  if (rows.empty())
    return "<p class=\"note\">No operator has a timed input yet.</p>";
  std::sort(rows.begin(), rows.end(),
            [](const op_row* a, const op_row* b) { return a->speedup.geomean > b->speedup.geomean; });
  double lo = 0.5, hi = 2.0;
  for (auto* r : rows) {
    lo = std::min(lo, r->speedup.low);
    hi = std::max(hi, r->speedup.high);
  }
  auto decade_lo = std::floor(std::log10(std::max(lo, 1e-4)));
  auto decade_hi = std::ceil(std::log10(std::min(hi, 1e4)));
  if (decade_hi - decade_lo < 1)
    decade_hi = decade_lo + 1;
  const double left = 56, top = 14, plot_h = 260, bar_w = rows.size() > 60 ? 7 : 14, gap = 2;
  double plot_w = std::max(480.0, static_cast<double>(rows.size()) * (bar_w + gap));
  auto y_of = [&](double x) {
    auto l = std::clamp(std::log10(std::max(x, 1e-9)), decade_lo, decade_hi);
    return top + plot_h * (decade_hi - l) / (decade_hi - decade_lo);
  };
  std::string svg = "<svg id=\"speedup-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
                    + num(left + plot_w + 10, "%.0f") + "\" height=\"" + num(top + plot_h + 30, "%.0f")
                    + "\" role=\"img\" aria-label=\"per-operator speedup, log scale\">";
  for (double d = decade_lo; d <= decade_hi + 1e-9; d += 1) {
    auto y = y_of(std::pow(10.0, d));
    svg += "<line x1=\"" + num(left, "%.0f") + "\" x2=\"" + num(left + plot_w, "%.0f") + "\" y1=\""
           + num(y, "%.1f") + "\" y2=\"" + num(y, "%.1f") + "\" stroke=\""
           + (d == 0 ? "#444" : "#ddd") + "\"/>";
    auto label = d >= 0 ? num(std::pow(10.0, d), "%.0fx") : num(std::pow(10.0, d), "%gx");
    svg += "<text x=\"" + num(left - 6, "%.0f") + "\" y=\"" + num(y + 4, "%.1f")
           + "\" text-anchor=\"end\" font-size=\"11\">" + label + "</text>";
  }
  auto base = y_of(1.0);
  double x = left + gap;
  for (auto* r : rows) {
    auto y = y_of(r->speedup.geomean);
    auto title = html_escape(r->name) + ": " + num(r->speedup.geomean, "%.3fx") + " ("
                 + num(r->speedup.low, "%.3f") + "-" + num(r->speedup.high, "%.3f") + "), " + r->verdict;
    svg += "<g class=\"bar\"><title>" + title + "</title><rect x=\"" + num(x, "%.1f") + "\" y=\""
           + num(std::min(y, base), "%.1f") + "\" width=\"" + num(bar_w, "%.0f") + "\" height=\""
           + num(std::max(1.0, std::abs(base - y)), "%.1f") + "\" fill=\"" + colour_of(r->verdict)
           + "\"/>";
    if (r->speedup.inputs > 1)
      svg += "<line x1=\"" + num(x + bar_w / 2, "%.1f") + "\" x2=\"" + num(x + bar_w / 2, "%.1f")
             + "\" y1=\"" + num(y_of(r->speedup.low), "%.1f") + "\" y2=\""
             + num(y_of(r->speedup.high), "%.1f") + "\" stroke=\"#222\"/>";
    svg += "</g>";
    x += bar_w + gap;
  }
  svg += "<text x=\"" + num(left, "%.0f") + "\" y=\"" + num(top + plot_h + 22, "%.0f")
         + "\" font-size=\"11\">operators, fastest first (" + std::to_string(rows.size())
         + "); bar: geomean speedup vs aten, line: its 95% interval</text></svg>";
  return svg;
}

std::string outcome_histogram(const std::vector<op_row>& rows) {
  std::map<std::string, size_t> counts;
  for (auto& r : rows)
    ++counts[r.verdict];
  if (counts.empty())
    return "<p class=\"note\">No operator has finished yet.</p>";
  size_t most = 0;
  for (auto& [v, n] : counts)
    most = std::max(most, n);
  const double left = 130, bar_h = 18, gap = 6, plot_w = 360;
  std::string svg = "<svg id=\"outcome-histogram\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
                    + num(left + plot_w + 60, "%.0f") + "\" height=\""
                    + num(static_cast<double>(counts.size()) * (bar_h + gap) + gap, "%.0f") + "\">";
  double y = gap;
  for (auto& [verdict, n] : counts) {
    auto w = plot_w * static_cast<double>(n) / static_cast<double>(most);
    svg += "<text x=\"" + num(left - 8, "%.0f") + "\" y=\"" + num(y + 13, "%.0f")
           + "\" text-anchor=\"end\" font-size=\"12\">" + html_escape(verdict) + "</text><rect x=\""
           + num(left, "%.0f") + "\" y=\"" + num(y, "%.0f") + "\" width=\"" + num(std::max(w, 1.0), "%.1f")
           + "\" height=\"" + num(bar_h, "%.0f") + "\" fill=\"" + colour_of(verdict) + "\"/><text x=\""
           + num(left + w + 6, "%.1f") + "\" y=\"" + num(y + 13, "%.0f") + "\" font-size=\"12\">"
           + std::to_string(n) + "</text>";
    y += bar_h + gap;
  }
  return svg + "</svg>";
}

std::string operator_table(const std::vector<op_row>& rows, const report_page& page) {
  std::string out =
    "<input id=\"filter\" type=\"search\" placeholder=\"filter operators, outcomes or flags\" "
    "oninput=\"filterRows()\"> <span id=\"shown\"></span>"
    "<table id=\"operators\"><thead><tr>"
    "<th data-type=\"text\">operator</th><th data-type=\"text\">verdict</th>"
    "<th data-type=\"text\">flags</th>"
    "<th data-type=\"num\">correct inputs</th><th data-type=\"num\">speedup</th>"
    "<th data-type=\"text\">95% interval</th><th data-type=\"num\">inputs passed / failed / not scored</th>"
    "<th data-type=\"num\">timed ran / failed</th><th data-type=\"num\">version</th>"
    "<th data-type=\"text\">files</th></tr></thead><tbody>\n";
  for (auto& r : rows) {
    auto& res = *r.result;
    auto rate = r.score.correctness_inputs ? static_cast<double>(r.score.passed_inputs)
                                               / static_cast<double>(r.score.correctness_inputs)
                                           : 0.0;
    std::string files = "<a href=\"operators/" + html_escape(r.name) + ".json\">record</a>";
    if (!page.kernel_dir.empty())
      files += " <a href=\"" + html_escape(page.kernel_dir + "/" + ops::op_name_to_folder_name(res.op_name))
               + "/\">kernel</a>";
    auto detail = res.detail.substr(0, res.detail.find('\n'));
    out += "<tr><td>" + html_escape(r.name) + "</td><td title=\"" + html_escape(detail)
           + "\"><span class=\"dot\" style=\"background:" + colour_of(r.verdict) + "\"></span>"
           + html_escape(r.verdict) + "</td><td class=\"flags\""
           + (r.remeasured.empty() ? "" : " title=\"" + html_escape(r.remeasured) + "\"") + ">"
           + html_escape(r.flags) + "</td><td data-v=\"" + num(rate, "%.4f") + "\">"
           + std::to_string(r.score.passed_inputs) + "/" + std::to_string(r.score.correctness_inputs)
           + "</td><td data-v=\"" + num(r.speedup.geomean, "%.6f") + "\">"
           + (r.speedup.inputs ? num(r.speedup.geomean, "%.3fx") : "-") + "</td><td>"
           + (r.speedup.inputs > 1 ? num(r.speedup.low, "%.3f") + " - " + num(r.speedup.high, "%.3f") : "")
           + "</td><td data-v=\"" + std::to_string(r.failed) + "\">" + std::to_string(r.passed) + " / "
           + std::to_string(r.failed) + " / " + std::to_string(r.unscorable) + "</td><td data-v=\""
           + std::to_string(r.perf_failed) + "\">" + std::to_string(r.perf_ran) + " / "
           + std::to_string(r.perf_failed) + "</td><td data-v=\"" + std::to_string(res.version) + "\">"
           + (res.version ? "v" + std::to_string(res.version) : "") + "</td><td>" + files + "</td></tr>\n";
  }
  return out + "</tbody></table>";
}

std::string version_history(const report_page& page) {
  if (page.versions.empty())
    return "";
  std::string out = "<h2>Versions</h2><p class=\"note\">Each kernel version of a generative "
                    "campaign as it was evaluated; the one that stands is marked.</p>"
                    "<table id=\"versions\"><thead><tr><th>operator</th><th>versions</th></tr></thead><tbody>";
  std::map<std::string, uint32_t> standing;
  for (auto& r : page.results)
    standing[r.op_name] = r.version;
  for (auto& [op, list] : page.versions) {
    out += "<tr><td>" + html_escape(backendbench_op_name(op)) + "</td><td>";
    for (auto& v : list) {
      auto row = row_of(v);
      bool stands = standing.count(op) && standing[op] == v.version;
      out += "<span class=\"version" + std::string(stands ? " stands" : "") + "\" style=\"border-color:"
             + colour_of(row.verdict) + "\" title=\"" + html_escape(v.detail.substr(0, 200)) + "\">v"
             + std::to_string(v.version) + " " + html_escape(row.verdict)
             + (row.speedup.inputs ? " " + num(row.speedup.geomean, "%.2fx") : "") + "</span> ";
    }
    out += "</td></tr>";
  }
  return out + "</tbody></table>";
}

const char* style = R"(<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em}
.meta{color:#555;font-size:.9em} .note{color:#555;font-size:.9em}
.banner{padding:.5em .8em;border-radius:4px;margin:.8em 0}
.running{background:#e3f2fd} .stopped{background:#fff3e0} .finished{background:#e8f5e9}
.scores{display:flex;gap:1em;flex-wrap:wrap} .score{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;min-width:12em}
.score b{font-size:1.6em;display:block}
table{border-collapse:collapse;font-size:.85em;margin-top:.5em} td,th{border-bottom:1px solid #e0e0e0;padding:3px 8px;text-align:left} td{white-space:nowrap}
th{cursor:pointer;background:#f5f5f5;position:sticky;top:0} th.asc:after{content:" \25B2"} th.desc:after{content:" \25BC"}
.dot{display:inline-block;width:.7em;height:.7em;border-radius:50%;margin-right:.4em}
.version{display:inline-block;border:2px solid;border-radius:4px;padding:0 .4em;margin:1px;font-size:.9em}
.version.stands{font-weight:bold;background:#f1f8e9}
#filter{padding:3px 6px;width:22em} .chart{overflow-x:auto}
code{background:#f5f5f5;padding:1px 4px}
</style>)";

// Sorting and filtering, kept across reloads in sessionStorage.
const char* script = R"(<script>
function filterRows(){var q=document.getElementById('filter').value.toLowerCase();var n=0,t=0;
document.querySelectorAll('#operators tbody tr').forEach(function(r){t++;var show=!q||r.textContent.toLowerCase().indexOf(q)>=0;r.style.display=show?'':'none';if(show)n++;});
document.getElementById('shown').textContent=n+' of '+t+' operators';try{sessionStorage.setItem('bbFilter',q);}catch(e){}}
function sortBy(i,dir){var th=document.querySelectorAll('#operators th');var tb=document.querySelector('#operators tbody');
var num=th[i].dataset.type==='num';var rows=Array.prototype.slice.call(tb.rows);
rows.sort(function(a,b){var x=a.cells[i],y=b.cells[i];var u=num?parseFloat(x.dataset.v||'0'):x.textContent,v=num?parseFloat(y.dataset.v||'0'):y.textContent;
return (u<v?-1:u>v?1:0)*dir;});rows.forEach(function(r){tb.appendChild(r);});
th.forEach(function(h){h.classList.remove('asc','desc');});th[i].classList.add(dir>0?'asc':'desc');try{sessionStorage.setItem('bbSort',i+','+dir);}catch(e){}}
document.querySelectorAll('#operators th').forEach(function(h,i){h.addEventListener('click',function(){sortBy(i,h.classList.contains('asc')?-1:1);});});
try{var f=sessionStorage.getItem('bbFilter');if(f)document.getElementById('filter').value=f;var s=sessionStorage.getItem('bbSort');if(s){var p=s.split(',');sortBy(+p[0],+p[1]);}}catch(e){}
filterRows();
</script>)";

} // namespace

speedup_interval speedup_of(const std::vector<performance_record>& performance) {
  speedup_interval out;
  std::vector<double> logs;
  for (auto& p : performance) {
    if (is_unscorable(p))
      continue;
    auto s = p.successfully_ran && p.speedup > 0 ? p.speedup : 1.0;
    logs.push_back(std::log(s));
  }
  out.inputs = logs.size();
  if (logs.empty())
    return out;
  double mean = 0;
  for (auto l : logs)
    mean += l;
  mean /= static_cast<double>(logs.size());
  out.geomean = out.low = out.high = std::exp(mean);
  if (logs.size() < 2)
    return out;
  double var = 0;
  for (auto l : logs)
    var += (l - mean) * (l - mean);
  var /= static_cast<double>(logs.size() - 1);
  auto half = 1.96 * std::sqrt(var / static_cast<double>(logs.size()));
  out.low = std::exp(mean - half);
  out.high = std::exp(mean + half);
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string utc_now_text() {
  auto t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string render_report_html(const report_page& page, const std::string& written_at) {
  std::vector<op_row> rows;
  for (auto& r : page.results)
    rows.push_back(row_of(r));
  std::sort(rows.begin(), rows.end(), [](const op_row& a, const op_row& b) { return a.name < b.name; });
  std::vector<const op_row*> pointers;
  for (auto& r : rows)
    pointers.push_back(&r);
  auto s = score_results(page.results, page.p);

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  out += "<title>bbcluster report" + std::string(page.phase == run_phase::running ? " (running)" : "")
         + "</title>";
  out += style;
  out += "</head><body>\n<h1>bbcluster report</h1>\n";
  out += "<p class=\"meta\">Written at <span id=\"written-at\">" + html_escape(written_at)
         + "</span>. Command: <code>" + html_escape(page.command) + "</code></p>\n";
  auto done = std::to_string(page.results.size()) + " of " + std::to_string(page.ops_total) + " operators";
  if (page.phase == run_phase::running)
    out += "<p class=\"banner running\" id=\"phase\">Running: " + done
           + " finished. This page reloads itself every " + std::to_string(page.reload_s)
           + " s.</p>\n";
  else if (page.phase == run_phase::stopped)
    out += "<p class=\"banner stopped\" id=\"phase\">Partial: the sweep was stopped with " + done
           + " finished; the scores cover those." + (page.resume_command.empty() ? "" :
           " Go on with <code>" + html_escape(page.resume_command) + "</code>") + "</p>\n";
  else
    out += "<p class=\"banner finished\" id=\"phase\">Finished: " + done + ".</p>\n";
  out += "<div class=\"scores\">";
  out += "<div class=\"score\">correctness score<b id=\"score-correctness\">" + num(s.correctness)
         + "</b>mean pass rate over operators</div>";
  out += "<div class=\"score\">performance score<b id=\"score-performance\">" + num(s.performance)
         + "</b>geomean speedup over operators</div>";
  out += "<div class=\"score\">perf@" + python_float(s.p) + " score<b id=\"score-perf-at-p\">"
         + num(s.perf_at_p) + "</b>correct and faster than " + python_float(s.p) + "x</div>";
  out += "<div class=\"score\">perf@" + python_float(s.p) + " significant<b id=\"score-perf-at-p-significant\">"
         + num(s.perf_at_p_significant) + "</b>correct, 95% interval above " + python_float(s.p)
         + "x</div>";
  out += "</div>\n";
  if (s.skipped)
    out += "<p class=\"note\">" + std::to_string(s.skipped)
           + " operators could not run here and are left out of the scores.</p>\n";
  if (!page.not_evaluated.empty()) {
    std::string names;
    for (auto& [op, why] : page.not_evaluated)
      names += (names.empty() ? "" : ", ") + backendbench_op_name(op) + " (" + why + ")";
    out += "<p class=\"note\" id=\"not-evaluated\">" + std::to_string(page.not_evaluated.size())
           + " selected operators were not evaluated, the backend does not implement them: "
           + html_escape(names) + ".</p>\n";
  }
  out += "<h2>Speedup per operator (log scale)</h2><div class=\"chart\">" + speedup_chart(pointers)
         + "</div>\n";
  out += "<h2>Outcomes</h2><div class=\"chart\">" + outcome_histogram(rows) + "</div>\n";
  out += "<h2>Operators</h2>\n" + operator_table(rows, page) + "\n";
  out += version_history(page);
  if (!page.conditions.empty()) {
    out += "<h2>Settings</h2>\n<p class=\"note\">What the sweep was started with, on every node "
           "(each operator's own are in its record's provenance).</p>\n<table id=\"settings\"><thead><tr><th>setting</th><th>value</th></tr></thead><tbody>\n";
    for (auto& [key, value] : page.conditions)
      out += "<tr><td>" + html_escape(key) + "</td><td>" + html_escape(value) + "</td></tr>\n";
    out += "</tbody></table>\n";
  }
  out += script;
  if (page.phase == run_phase::running)
    out += "<script>setTimeout(function(){location.reload();}," + std::to_string(page.reload_s * 1000)
           + ");</script>";
  out += "\n</body></html>\n";
  return out;
}

} // namespace bb
