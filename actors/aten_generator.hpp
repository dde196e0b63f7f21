#pragma once

#include <caf/typed_event_based_actor.hpp>

#include "messages/types.hpp"

namespace bb {

struct aten_generator_state {
  static inline const char* name = "aten_generator";
};

using aten_generator_pointer = generator_actor::stateful_pointer<aten_generator_state>;

/// The aten backend's generator: the kernel of every operator is the aten operator itself.
generator_actor::behavior_type aten_generator(aten_generator_pointer self);

} // namespace bb
