#pragma once

// The evaluator <-> bbrunner protocol: length-prefixed msgpack maps over a dedicated socket
// (never the kernel's stdout or stderr). The runner speaks first with a hello.

#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// Evaluator -> runner.
struct runner_request {
  /// "evaluate" (run `job`), "resolve" (look up `ops` in the dispatcher), "check" (allocate,
  /// compute and synchronize on the device) or "stop" (exit).
  std::string kind;
  eval_job job;
  /// Operator names (aten.X.Y) for "resolve".
  std::vector<std::string> ops;
  /// For "evaluate": the job's scratch folder, the runner's working folder while it runs.
  std::string work_dir;
  MSGPACK_DEFINE_MAP(kind, job, ops, work_dir);
};

/// Runner -> evaluator.
struct runner_reply {
  /// "hello" (once, at start: protocol and where), "progress" (before each step of a job
  /// that runs kernel or reference code, `text` naming it: the evaluator's per-call timeout
  /// restarts on each), "result" (one per job), "schemas" (one per resolve), "checked" (one
  /// per check, `text` empty when the device works, else why not).
  std::string kind;
  uint32_t protocol = protocol_version;
  std::string text;
  provenance where;
  eval_result result;
  /// For "schemas": the schema of each requested op, in order; empty when this torch lacks it.
  std::vector<std::string> schemas;
  /// For "progress": the step sets the runner up (loading a kernel, starting Python) and is
  /// bounded by the start timeout rather than the call timeout.
  bool setup = false;
  MSGPACK_DEFINE_MAP(kind, protocol, text, where, result, schemas, setup);
};

} // namespace bb
