#include "actors/report_pace.hpp"

#include <algorithm>

namespace bb {

report_pace::report_pace(clock::duration interval, double spacing)
  : interval_(interval), spacing_(spacing) {
}

bool report_pace::due(clock::time_point now) const {
  return pending_ && (interval_ == clock::duration::zero() || now >= next_);
}

void report_pace::rewritten(clock::time_point now, clock::duration took) {
  pending_ = false;
  ++rewrites_;
  if (interval_ == clock::duration::zero())
    return;
  auto spaced = std::chrono::duration_cast<clock::duration>(took * spacing_);
  next_ = now + std::max(interval_, spaced);
}

std::optional<report_pace::clock::duration> report_pace::arm_tick(clock::time_point now) {
  if (!pending_ || tick_armed_ || due(now))
    return std::nullopt;
  tick_armed_ = true;
  return next_ - now;
}

} // namespace bb
