#pragma once

// The opinfo suite's inputs where they run: a job names each sample as
// "opinfo(NAME, VARIANT, DTYPE, INDEX, seed=SEED)" and the runner regenerates it on its own
// device through python/bbcluster_opinfo.py (beside the programs) in the embedded Python,
// which seeds every generator with SEED before listing the OpInfo's samples, so every runner
// builds the same ones.

#include <string>

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>

#include "runner/inputs.hpp"

namespace bb::runner {

/// Whether an input text names an OpInfo sample rather than an argument string.
bool is_opinfo_sample(const std::string& text);

/// The sample `text` names, built on `device` and bound to `schema`: its positional and
/// keyword arguments as the sample gives them, each converted to its formal's type. Throws python_error (a torch without the OpInfo, a sample
/// index past its samples, an OpInfo database that does not import) or c10::Error (a sample
/// the schema cannot take).
built_call build_opinfo_sample(const std::string& text, const c10::FunctionSchema& schema,
                               const at::Device& device);

} // namespace bb::runner
