#pragma once

#include <map>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "artefacts/kernel_dir.hpp"
#include "messages/types.hpp"

namespace bb {

struct directory_generator_state {
  static inline const char* name = "directory_generator";
  /// Kernel per full operator name.
  std::map<std::string, artefact> kernels;
};

using directory_generator_pointer = generator_actor::stateful_pointer<directory_generator_state>;

/// The directory backend's generator: the kernel of an operator is the implementation file
/// of its folder, read when the sweep was planned. An operator without one is an error.
generator_actor::behavior_type directory_generator(directory_generator_pointer self,
                                                   std::vector<directory_kernel> kernels);

} // namespace bb
