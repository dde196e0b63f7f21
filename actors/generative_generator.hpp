#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "generate/generation.hpp"
#include "generate/run_folder.hpp"
#include "messages/types.hpp"

namespace bb {

struct generative_config {
  /// "llm" or "kernel_agent": names the run folder and the summaries.
  std::string backend;
  /// The operators of the sweep, with what their authors are told.
  std::vector<op_brief> ops;
  version_policy policy;
  /// The campaign's run folder, made by the program (run_folder::create).
  run_folder folder;
  /// A resumed campaign: the versions its journal says were evaluated, per operator.
  std::map<std::string, std::vector<eval_result>> restored;
  /// Bound on one author's answer (its own timeouts and retries included).
  caf::timespan author_timeout = std::chrono::hours(2);
};

caf::error validate(const generative_config& cfg);

/// One operator's campaign: its versions, their code and what the summary says.
struct op_campaign {
  op_brief brief;
  version_history history;
  op_summary summary;
  /// The code of the latest version, quoted in the next version's feedback.
  std::string last_code;
  uint32_t versions_asked = 0;
};

struct generative_state {
  static inline const char* name = "generative_generator";
  generative_config cfg;
  run_folder folder;
  std::map<std::string, op_campaign> ops;
  std::vector<author_actor> idle;
  /// Requests waiting for an idle author, with what to do with the kernel.
  struct pending {
    author_request req;
    std::function<void(artefact)> deliver;
  };
  std::deque<pending> waiting;
};

using generative_pointer = generator_actor::stateful_pointer<generative_state>;

/// The one generative layer of the llm and kernel_agent backends. Answers `generate` with
/// v1 of an operator's kernel and `revise` with the next version, written with the last
/// evaluation as feedback, until a version is correct (and, if asked, fast) or the versions
/// are spent; then with the version that stands. Writes every version and the summaries
/// into the run folder as it goes. Its authors write the kernels, each one version at a
/// time; requests beyond them wait here, so generation never blocks evaluation.
generator_actor::behavior_type generative_generator(generative_pointer self, generative_config cfg,
                                                    std::vector<author_actor> authors);

} // namespace bb
