#include "results/progress_board.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "results/scoring.hpp"

namespace bb {

double progress_snapshot::rate() const {
  return elapsed_s > 0 && inputs_done_here > 0 ? static_cast<double>(inputs_done_here) / elapsed_s : 0.0;
}

double progress_snapshot::eta_s() const {
  auto r = rate();
  if (r <= 0)
    return -1.0;
  return static_cast<double>(inputs_total - std::min(inputs_done, inputs_total)) / r;
}

progress_board::progress_board(std::map<std::string, uint64_t> inputs,
                               const std::vector<eval_result>& previous)
  : inputs_(std::move(inputs)) {
  s_.ops_total = inputs_.size();
  for (auto& [op, n] : inputs_)
    s_.inputs_total += n;
  for (auto& r : previous)
    count(r);
}

void progress_board::count(const eval_result& r) {
  ++s_.ops_done;
  auto n = inputs_.find(r.op_name);
  uint64_t counted = 0;
  if (auto shards = shard_inputs_.find(r.op_name); shards != shard_inputs_.end()) {
    counted = shards->second;
    shard_inputs_.erase(shards);
  }
  auto all = n == inputs_.end() ? r.correctness.size() : n->second;
  s_.inputs_done += all - std::min<uint64_t>(all, counted);
  if (auto f = failure_of(r); !f.empty())
    ++s_.failures[f];
}

void progress_board::write_failed(const std::string& what) {
  std::lock_guard<std::mutex> guard(m_);
  if (failed_seen_.insert(what).second)
    failed_writes_.push_back(what);
}

std::vector<std::string> progress_board::failed_writes() const {
  std::lock_guard<std::mutex> guard(m_);
  return failed_writes_;
}

size_t progress_board::add_slot(const std::string& node) {
  std::lock_guard<std::mutex> guard(m_);
  s_.slots.push_back({node, "", false});
  return s_.slots.size() - 1;
}

void progress_board::slot_busy(size_t slot, const std::string& op) {
  std::lock_guard<std::mutex> guard(m_);
  if (slot < s_.slots.size())
    s_.slots[slot].op = op;
}

void progress_board::slot_idle(size_t slot) {
  slot_busy(slot, "");
}

void progress_board::slot_gone(size_t slot) {
  std::lock_guard<std::mutex> guard(m_);
  if (slot < s_.slots.size()) {
    s_.slots[slot].op.clear();
    s_.slots[slot].gone = true;
  }
}

void progress_board::forget_streamed(const std::string& op, uint64_t begin, uint64_t end) {
  auto it = streamed_.find(op);
  if (it == streamed_.end())
    return;
  auto& done = it->second;
  for (auto i = done.lower_bound(begin); i != done.end() && *i < end;) {
    i = done.erase(i);
    --streamed_total_;
  }
  if (done.empty())
    streamed_.erase(it);
}

void progress_board::input_done(const std::string& op, uint64_t index) {
  std::lock_guard<std::mutex> guard(m_);
  auto n = inputs_.find(op);
  if (n == inputs_.end() || index >= n->second)
    return;
  if (streamed_[op].insert(index).second)
    ++streamed_total_;
}

void progress_board::shard_finished(const eval_result& r) {
  std::lock_guard<std::mutex> guard(m_);
  forget_streamed(r.op_name, r.shard.correctness_begin, r.shard.correctness_begin + r.shard.correctness_count);
  auto n = inputs_.find(r.op_name);
  uint64_t all = n == inputs_.end() ? r.shard.correctness_total : n->second;
  // A campaign evaluates each version on every shard: an input counts once.
  auto& counted = shard_inputs_[r.op_name];
  auto add = std::min<uint64_t>(r.shard.correctness_count, all - std::min(all, counted));
  counted += add;
  s_.inputs_done += add;
  s_.inputs_done_here += add;
}

void progress_board::finished(const eval_result& r) {
  std::lock_guard<std::mutex> guard(m_);
  forget_streamed(r.op_name, 0, std::numeric_limits<uint64_t>::max());
  auto before = s_.inputs_done;
  count(r);
  s_.inputs_done_here += s_.inputs_done - before;
}

void progress_board::stopping(const std::string& why) {
  std::lock_guard<std::mutex> guard(m_);
  s_.stopping = why;
}

progress_snapshot progress_board::snapshot() const {
  std::lock_guard<std::mutex> guard(m_);
  auto s = s_;
  s.inputs_done = std::min(s.inputs_total, s.inputs_done + streamed_total_);
  s.inputs_done_here += streamed_total_;
  s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return s;
}

std::string failure_of(const eval_result& r) {
  if (r.outcome != outcome::ok)
    return to_string(r.outcome);
  auto s = score_result(r);
  return s.skipped || s.correct ? "" : to_string(outcome::incorrect);
}

std::string format_duration(double seconds) {
  auto t = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char buf[64];
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", t / 60, t % 60);
  return buf;
}

namespace {

std::string counts_and_times(const progress_snapshot& s) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%llu/%llu operators, %llu/%llu inputs, %.1f inputs/s, elapsed %s, ",
                static_cast<unsigned long long>(s.ops_done), static_cast<unsigned long long>(s.ops_total),
                static_cast<unsigned long long>(s.inputs_done),
                static_cast<unsigned long long>(s.inputs_total), s.rate(),
                format_duration(s.elapsed_s).c_str());
  std::string out = buf;
  if (!s.stopping.empty())
    return out + s.stopping;
  auto eta = s.eta_s();
  return out + (eta < 0 ? "time left unknown" : "about " + format_duration(eta) + " left");
}

std::string failures_text(const progress_snapshot& s) {
  std::string out;
  for (auto& [name, n] : s.failures)
    out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
  return out.empty() ? "none" : out;
}

// Each node's slots in the order they were added: busy count and the operators held.
std::vector<std::string> slot_lines(const progress_snapshot& s) {
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<const progress_snapshot::slot*>> by_node;
  for (auto& slot : s.slots) {
    if (!by_node.count(slot.node))
      nodes.push_back(slot.node);
    by_node[slot.node].push_back(&slot);
  }
  std::vector<std::string> out;
  for (auto& node : nodes) {
    size_t busy = 0, gone = 0;
    std::string held;
    for (auto* slot : by_node[node]) {
      gone += slot->gone;
      if (!slot->op.empty()) {
        ++busy;
        held += "  " + slot->op;
      }
    }
    auto line = "  " + node + ": " + std::to_string(busy) + "/" + std::to_string(by_node[node].size())
                + " slots busy";
    if (gone == by_node[node].size())
      line += " (gone)";
    else if (gone > 0)
      line += " (" + std::to_string(gone) + " gone)";
    out.push_back(line + (held.empty() ? "" : ":" + held));
  }
  return out;
}

} // namespace

std::vector<std::string> render_progress_block(const progress_snapshot& s, size_t width) {
  std::vector<std::string> lines = {"bbcluster: " + counts_and_times(s)};
  auto slots = slot_lines(s);
  lines.insert(lines.end(), slots.begin(), slots.end());
  lines.push_back("  failures: " + failures_text(s));
  for (auto& l : lines)
    if (width > 0 && l.size() > width)
      l = l.substr(0, width > 3 ? width - 3 : width) + (width > 3 ? "..." : "");
  return lines;
}

std::string render_progress_line(const progress_snapshot& s) {
  size_t busy = 0, alive = 0;
  for (auto& slot : s.slots) {
    busy += !slot.op.empty();
    alive += !slot.gone;
  }
  return "progress: " + counts_and_times(s) + "; " + std::to_string(busy) + "/"
         + std::to_string(alive) + " slots busy; failures: " + failures_text(s);
}

} // namespace bb
