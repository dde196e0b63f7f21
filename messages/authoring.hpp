#pragma once

// What the generative layer says to its authors (the llm and kernel_agent backends) and to the
// coordinator. Plain aggregates; their inspect functions are in types.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// The kernel language an llm author is asked to write (BackendBench's --dsl, plus cuda).
/// cutedsl is NVIDIA's CuTe DSL (the nvidia-cutlass-dsl package), helion the Helion DSL; both
/// are .py kernels like triton and pytorch.
BB_NAMED_ENUM(kernel_dsl, triton, pytorch, cuda, cutedsl, helion);

/// What an author is told about one operator.
struct op_brief {
  /// Full name: aten.relu.default.
  std::string op_name;
  /// Folder and entry prefix: relu (for .default), add__Tensor.
  std::string folder;
  /// The aten schema, e.g. "aten::relu(Tensor self) -> Tensor".
  std::string schema;
  /// Example inputs from the suite, as argument strings (largest first).
  std::vector<std::string> examples;
};

/// One request to an author: write version `version` of the kernel for `op`.
struct author_request {
  op_brief op;
  uint32_t version = 1;
  /// The evaluation of the previous version, written for the author; empty for v1.
  std::string feedback;
  /// That evaluation itself (version 0 for v1), for authors that put it to the model in
  /// another form (kernel_agent: as checks in its test code).
  eval_result previous;
  /// Where the author may keep logs and sessions (the run folder's agent_logs/).
  std::string log_dir;
};

/// What an author answered.
struct author_reply {
  /// The kernel's source; empty when there is none (see `why`).
  std::string code;
  /// py, cpp or cu.
  kernel_kind kind = kernel_kind::py;
  /// Why there is no code: no fenced block, the agent failed, the request failed.
  std::string why;
  /// Whether a failure is worth asking again (a timeout, a 5xx, a crashed agent).
  bool transient = false;
  /// The agent's session folder, to preserve in the run folder; empty for the llm backend.
  std::string session_dir;
  /// What the author says about how it went (model, tokens, agent rounds, worker).
  std::string note;
  /// Requests or agent runs this answer took, retries included.
  uint32_t tries = 0;
  double seconds = 0.0;
};

/// The generator's answer to an evaluated version: the next version to evaluate, or the
/// operator's final result.
struct generation_step {
  bool final = true;
  /// The operator's result when final (the version that stands).
  eval_result result;
  /// The next version's kernel when not final; kind none when that version has no kernel
  /// (its `why_none` says why).
  artefact next;
};

} // namespace bb
