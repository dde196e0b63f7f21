#pragma once

#include <string>

#include "messages/records.hpp"

namespace bb {

/// The result of a job that ended without the runner evaluating it (crash, timeout, lost
/// runner): every input gets a failed record carrying `why`, so reports still list them.
eval_result failed_result(const eval_job& job, outcome why, const std::string& detail);

} // namespace bb
