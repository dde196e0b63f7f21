#pragma once

// How a job, or one input of a job, ended: the closed set of outcomes and the rules that go
// with each, in one place (docs/architecture.md, "Outcomes"). Torch- and CAF-free; on the
// wire (msgpack) and in the journal an outcome is its name (messages/named_enum.hpp).

#include <cstdint>
#include <optional>
#include <string>

#include "messages/named_enum.hpp"

namespace bb {

BB_NAMED_ENUM(outcome,
  /// The runner evaluated every input; each input carries its own verdict.
  ok,
  /// Some output did not match the reference (an input's verdict).
  incorrect,
  /// The kernel raised, or could not be loaded.
  exception,
  /// A native kernel did not build.
  compile_failed,
  /// The runner died while running kernel code (a signal, an exit).
  crashed,
  /// One call or the whole job ran past its timeout.
  timed_out,
  /// The CUDA context was lost: the runner that saw it must not run another job.
  cuda_error,
  /// The kernel ran out of memory.
  oom,
  /// The reference (aten) itself failed, crashed, timed out or disagreed with itself on an
  /// input: the input is left out, as BackendBench leaves out inputs whose reference fails.
  /// Never the kernel's failure.
  reference_error,
  /// The operator or an input's layout cannot be evaluated by this torch.
  unsupported,
  /// A CUDA kernel on a node without a GPU (or without nvcc): not evaluated here.
  needs_cuda,
  /// The infrastructure failed (a node or an evaluator lost, bbrunner's own fault), not the
  /// kernel.
  infra_error,
  /// A generative backend produced no kernel for this attempt (no code in the reply, the
  /// agent failed, the request failed): counts as a failed operator.
  no_kernel);

inline constexpr outcome last_outcome = outcome::no_kernel;

/// How a reference_error's message starts when the reference ran but disagreed with itself
/// (rather than failing to run: raising, running out of memory, timing out).
inline constexpr const char* reference_disagrees_text = "the reference does not agree with itself";

/// The outcome named at the start of `text` ("reference_error: ..."), if any.
inline std::optional<outcome> outcome_prefix(const std::string& text) {
  auto end = text.find(':');
  outcome x;
  if (from_string(text.substr(0, end), x))
    return x;
  return std::nullopt;
}

/// A fault of the runner or the infrastructure rather than a verdict on the kernel's
/// results: worth running the job again on a fresh runner.
inline bool is_retryable(outcome x) {
  return x == outcome::crashed || x == outcome::timed_out || x == outcome::infra_error;
}

/// Not the kernel's doing at all: retried without counting against the kernel's attempts.
inline bool is_infrastructure(outcome x) {
  return x == outcome::infra_error;
}

/// Leaves the input (or, for a whole job, the operator) out of the scores: nothing can be
/// said about the kernel there.
inline bool is_skipped(outcome x) {
  return x == outcome::reference_error || x == outcome::unsupported || x == outcome::needs_cuda;
}

/// The runner that saw it cannot be trusted with another job and is replaced.
inline bool spoils_runner(outcome x) {
  return x == outcome::cuda_error;
}

/// A job that ended this way did not evaluate its inputs and counts as a failed operator.
inline bool fails_job(outcome x) {
  return x != outcome::ok && !is_skipped(x);
}

} // namespace bb
