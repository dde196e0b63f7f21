#pragma once

// When the reporter rewrites its growing reports (docs/architecture.md, "Reports"): not after
// every operator, which costs O(N) each and O(N^2) over a sweep, but at most once an
// interval, and never so often that rewriting takes more than a share of the time however
// many operators there are. No actors here: the reporter asks, and arms its own tick.

#include <chrono>
#include <cstddef>
#include <optional>

namespace bb {

class report_pace {
public:
  using clock = std::chrono::steady_clock;

  /// Rewrites at least `interval` apart, and `spacing` times the last rewrite's duration
  /// apart (20: rewriting takes at most a twenty-first of the time). An interval of zero
  /// rewrites after every change (what tests that read the reports after each operator use).
  explicit report_pace(clock::duration interval, double spacing = 20.0);

  /// Something the reports show came in.
  void changed() {
    pending_ = true;
  }

  /// Whether to rewrite now: a change is pending and the next rewrite's time has come.
  bool due(clock::time_point now) const;

  /// The reports were rewritten, ending at `now`, in `took` (the reporter's own time, as
  /// measured, not the clock's).
  void rewritten(clock::time_point now, clock::duration took);

  /// When a pending change is not due yet and no tick is armed: how long until it is, and
  /// the tick counts as armed from now; otherwise nothing.
  std::optional<clock::duration> arm_tick(clock::time_point now);

  /// The armed tick arrived.
  void ticked() {
    tick_armed_ = false;
  }

  bool pending() const {
    return pending_;
  }

  /// Rewrites so far.
  size_t rewrites() const {
    return rewrites_;
  }

  /// When the next rewrite may be.
  clock::time_point next() const {
    return next_;
  }

private:
  clock::duration interval_;
  double spacing_;
  clock::time_point next_{};
  bool pending_ = false;
  bool tick_armed_ = false;
  size_t rewrites_ = 0;
};

} // namespace bb
