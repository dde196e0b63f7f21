#include "actors/aten_generator.hpp"

namespace bb {

generator_actor::behavior_type aten_generator(aten_generator_pointer) {
  return {
    [](atom::generate, const std::string&) -> artefact {
      artefact a;
      a.kind = kernel_kind::aten;
      a.hash = "aten";
      return a;
    },
    // One kernel per operator: its evaluation is final.
    [](atom::revise, eval_result& r) -> generation_step {
      generation_step step;
      step.result = std::move(r);
      return step;
    },
  };
}

} // namespace bb
