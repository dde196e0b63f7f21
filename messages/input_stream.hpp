#pragma once

// Each input's records as the input ends, for a job with a stream_tag (a served request's):
// the runner sends them to its evaluator, which publishes them here; a process that wants them
// (bbcluster serve, bbnode's server relaying them to its coordinator) sets the sink. One sink
// per process; publishing with none set drops the records (the job's result carries them all).
// A process that both relays (node_server) and receives (remote_node) must not set tags: its
// links would publish back into its own relay (tests that do so set none).

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "messages/records.hpp"

namespace bb {

/// Receives `records` (an eval_result holding one input's records, with its job's id, attempt
/// and operator) tagged `tag`; `index` is the input's among its operator's (of the correctness
/// inputs when a correctness record is there, else of the performance inputs). Called on the
/// publishing thread (an evaluator's), so it must only hand them on.
using input_sink = std::function<void(const std::string& tag, const eval_result& records, uint32_t index)>;

namespace detail {
struct input_stream {
  std::mutex m;
  input_sink sink;
};
inline input_stream& the_input_stream() {
  static input_stream s;
  return s;
}
} // namespace detail

/// Sets (or, with an empty function, clears) this process's sink.
inline void set_input_sink(input_sink sink) {
  auto& s = detail::the_input_stream();
  std::lock_guard<std::mutex> lock(s.m);
  s.sink = std::move(sink);
}

/// Hands one input's records to the sink, if any.
inline void publish_input(const std::string& tag, const eval_result& records, uint32_t index) {
  auto& s = detail::the_input_stream();
  std::lock_guard<std::mutex> lock(s.m);
  if (s.sink)
    s.sink(tag, records, index);
}

} // namespace bb
