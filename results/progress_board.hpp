#pragma once

// How far a sweep is, for a person watching it: operators and inputs done of total, each
// node's slots busy or idle with the operator they hold, failures by outcome, elapsed and
// estimated time left. Updated from several threads (the reporter, the slot watchers),
// read by the console; drawn as a block (terminal) or one line (a file). No actors here.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// What the board shows at one moment.
struct progress_snapshot {
  uint64_t ops_total = 0;
  uint64_t ops_done = 0;
  uint64_t inputs_total = 0;
  uint64_t inputs_done = 0;
  /// Inputs done by this process (not those a resumed sweep found done), for the rate.
  uint64_t inputs_done_here = 0;
  double elapsed_s = 0.0;
  struct slot {
    std::string node;
    /// The operator it evaluates; empty when idle.
    std::string op;
    bool gone = false;
  };
  std::vector<slot> slots;
  /// Operators that failed, by outcome ("incorrect" for one that ran but got an input wrong).
  std::map<std::string, uint64_t> failures;
  /// Set once the sweep was told to stop; says why and what happens now.
  std::string stopping;

  /// Inputs per second done by this process; 0 before the first.
  double rate() const;
  /// Seconds left at the current rate; negative when unknown.
  double eta_s() const;
};

class progress_board {
public:
  /// A sweep of the operators in `inputs` (each with its number of inputs), of which a
  /// resumed sweep finished `previous` before.
  explicit progress_board(std::map<std::string, uint64_t> inputs,
                          const std::vector<eval_result>& previous = {});

  /// Adds an evaluator slot of `node`; returns its index.
  size_t add_slot(const std::string& node);
  void slot_busy(size_t slot, const std::string& op);
  void slot_idle(size_t slot);
  /// The slot's evaluator is gone (its node lost, or the sweep over).
  void slot_gone(size_t slot);
  /// One shard's terminal result: its inputs count as done.
  void shard_finished(const eval_result& r);
  /// Input `index` (of the correctness inputs) of `op`, still running, ended: it counts as done
  /// until its operator's or shard's result, which counts it for good (an operator of 1,957
  /// inputs shows its progress as it goes, not only at its end).
  void input_done(const std::string& op, uint64_t index);
  /// One operator's final result.
  void finished(const eval_result& r);
  /// The sweep is stopping: `why` is shown in place of the estimate.
  void stopping(const std::string& why);
  /// A write the sweep's records now lack (the journal's, an operator's record, a report's
  /// last version): `what` names the file and why ("cannot write PATH: No space left on
  /// device"). The sweep then ends non-zero, naming them (nodes/sweep.cpp).
  void write_failed(const std::string& what);
  /// Those writes, each text once, in the order they first failed.
  std::vector<std::string> failed_writes() const;

  progress_snapshot snapshot() const;

private:
  void count(const eval_result& r);

  mutable std::mutex m_;
  std::map<std::string, uint64_t> inputs_;
  /// Inputs of unfinished operators counted from their shards.
  std::map<std::string, uint64_t> shard_inputs_;
  /// Inputs of unfinished operators (or shards) that ended, by index: counted in the snapshot.
  std::map<std::string, std::set<uint64_t>> streamed_;
  uint64_t streamed_total_ = 0;
  void forget_streamed(const std::string& op, uint64_t begin, uint64_t end);
  progress_snapshot s_;
  std::vector<std::string> failed_writes_;
  std::set<std::string> failed_seen_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

/// The operator's outcome as the board counts it: "" when it passed (or was skipped), else
/// the outcome name, "incorrect" for a job that ran with a wrong input.
std::string failure_of(const eval_result& r);

/// "1:02:03" (or "4:05" under an hour).
std::string format_duration(double seconds);

/// The block a terminal shows, one string per line, each cut to `width` columns.
std::vector<std::string> render_progress_block(const progress_snapshot& s, size_t width);

/// One line for a log: "progress: 12/136 operators, 1234/15568 inputs, 41.2 inputs/s, ...".
std::string render_progress_line(const progress_snapshot& s);

} // namespace bb
