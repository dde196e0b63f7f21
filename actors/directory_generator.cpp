#include "actors/directory_generator.hpp"

#include "messages/errors.hpp"

namespace bb {

generator_actor::behavior_type directory_generator(directory_generator_pointer self,
                                                   std::vector<directory_kernel> kernels) {
  for (auto& k : kernels)
    self->state.kernels.emplace(k.op_name, std::move(k.kernel));
  return {
    [=](atom::generate, const std::string& op_name) -> caf::result<artefact> {
      auto it = self->state.kernels.find(op_name);
      if (it == self->state.kernels.end())
        return make_error(errc::bad_input, "no kernel for " + op_name + " in the directory");
      return it->second;
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
