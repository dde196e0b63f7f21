#pragma once

// Removing a folder tree with the C library alone. In a process that links libtorch,
// std::filesystem may be the copy libtorch.so exports rather than libstdc++'s (which one the
// loader binds depends on the link order and the machine), and that copy's remove_all of a
// folder with contents calls through a null pointer on the machines we run on: a runner that
// emptied a folder crashed, and the crash was taken for its kernel's.

#include <cstdint>
#include <string>

namespace bb {

/// Removes `path` and everything under it, never following a link (a link is removed, not
/// what it points to). A path that does not exist is no error. Returns how many entries were
/// removed, and in `error` why not all of them were (empty when all were).
uint64_t remove_tree(const std::string& path, std::string& error);

/// Where the loader found std::filesystem::remove_all in this process (a library's path),
/// for a program's log: libtorch.so there means the hazard above is live.
std::string std_filesystem_library();

} // namespace bb
