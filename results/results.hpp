#pragma once

#include <string>
#include <vector>

#include "messages/records.hpp"

namespace bb {

/// The result of a job that ended without the runner evaluating it (crash, timeout, lost
/// runner): every input gets a failed record carrying `why`, so reports still list them.
eval_result failed_result(const eval_job& job, outcome why, const std::string& detail);

/// One operator's result from the terminal results of its shards (docs/architecture.md,
/// "Shards"), in any order: the records in the operator's input order, flags in the order
/// they were raised, phases, wall time and restarts summed. Its outcome is that of an
/// unsharded job: the first shard's (in input order) that ended otherwise than ok, a shard
/// whose every reference failed counting only when all did; a crash, timeout or
/// infrastructure failure fails every input of the operator, as it fails every input of an
/// unsharded job. A single shard that is the whole operator is returned as it is.
eval_result merge_shards(std::vector<eval_result> shards);

} // namespace bb
