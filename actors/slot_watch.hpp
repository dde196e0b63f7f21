#pragma once

// A SLOT WATCH: stands in front of one evaluator (local or a node's remote slot) and tells the
// progress board when it takes a job and when it is idle again. To the coordinator it is the
// evaluator: it answers as the evaluator does and dies with it (a link), so the coordinator's
// monitor sees a lost evaluator as before.

#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "messages/types.hpp"
#include "results/progress_board.hpp"

namespace bb {

/// Wraps each evaluator of `node` in a slot watch on `board`; returns the watches, in order.
std::vector<evaluator_actor> watch_slots(caf::actor_system& sys, const std::vector<evaluator_actor>& evaluators,
                                         const std::string& node, std::shared_ptr<progress_board> board);

} // namespace bb
