#pragma once

// bbrunner's evaluation core: builds inputs, runs the aten reference and the kernel, checks
// and times. This header is torch-free; the implementation links libtorch.

#include <cstdint>
#include <functional>
#include <string>

#include "messages/records.hpp"
#include "messages/runner_protocol.hpp"

namespace bb::runner {

/// One step of a job, told to the evaluator before it starts: the evaluator's per-call
/// timeout restarts on each, and a step that runs past it is blamed on `side`.
struct step {
  std::string text;
  /// Sets the runner up (loading a kernel, starting Python) or is bbrunner's own work on an
  /// input (building it, checking results): bounded by the start timeout, at least.
  bool setup = false;
  code_side side = code_side::neither;
  /// The input's list and index, when the step is about an input.
  input_kind input = input_kind::none;
  uint32_t input_index = 0;
  /// Not a step but an input that ended, for a job with a stream_tag: its records (one or
  /// both; the performance record's input is `input_index` of the performance inputs). Its
  /// correctness record is final unless a later input's timed calls mark it (they are the
  /// same input only in a job whose two lists differ) or the job fails as a whole.
  const correctness_record* correctness = nullptr;
  const performance_record* performance = nullptr;
};

/// Called before each step that runs kernel or reference code, and (with a stream_tag) after
/// each input that ended.
using progress_fn = std::function<void(const step&)>;

/// Applies what `opts` sets for the whole process (a CPU runner's threads), and makes the heap
/// steady (no memory given back between timed calls).
void apply_options(const runner_options& opts);

/// Where this runner measures: node, device name, driver, torch version.
provenance describe(const runner_options& opts);

/// The dispatcher schema of an op name (aten.X.Y), or "" when this torch lacks it.
std::string resolve_schema(const std::string& op_name);

/// The tensors built for one input of `op_name`, a line each (sizes, strides, dtype and a
/// checksum of their values), for --print-inputs; an error text when the input cannot be built.
std::string describe_input(const std::string& op_name, const std::string& call_text,
                           const runner_options& opts);

/// Allocates, computes and synchronizes on the runner's device: "" when that works, else why.
std::string check_device(const runner_options& opts);

/// Evaluates every input of `job`; never throws (a failure becomes the job's outcome; an
/// exception in the runner's own code is infra_error, never the kernel's). Outcome
/// cuda_error means the CUDA context is lost: the runner must exit after replying. The
/// result's phases say where the time went.
eval_result evaluate_job(const eval_job& job, const runner_options& opts, const progress_fn& progress);

} // namespace bb::runner
