#pragma once

// The runner side of the runner protocol (messages/runner_protocol.hpp): hello, then one reply
// per request until "stop" or the evaluator goes away. bbrunner evaluates; the simulated
// cluster's sim_runner waits a modelled time; the loop around them is one.

#include <functional>
#include <string>

#include "messages/runner_protocol.hpp"

namespace bb {

/// What a runner program does with each kind of request.
struct runner_handlers {
  /// "configure": apply the options; returns where the runner runs ("ready").
  std::function<provenance(const runner_options&)> configure;
  /// "resolve": one operator's schema.
  std::function<std::string(const std::string& op)> resolve;
  /// "check": a line on the device, for `bbnode --check`.
  std::function<std::string(const runner_options&)> check;
  /// A job: its "result" reply; it may send "progress" frames on `fd` first.
  std::function<runner_reply(int fd, const runner_request&, const runner_options&)> evaluate;
  /// After a job's result: whether the job left this process unfit for another (a CUDA graph
  /// capture that failed can leave torch's default generator in capture mode). Optional.
  std::function<bool()> spoiled;
};

/// One reply frame to the evaluator; false when the channel is gone.
bool send_reply(int fd, const runner_reply& reply);

/// Serves requests on `fd`. Returns the runner's exit status: 0 stopped or the evaluator
/// closed the channel, 3 the channel broke or a request was malformed, 4 a result left this
/// process spoiled (a lost CUDA context, a kernel that replaced the timers, `spoiled`), so the evaluator
/// starts a fresh one. `name` prefixes its messages on stderr.
int serve_runner(int fd, const char* name, const runner_handlers& handlers);

} // namespace bb
