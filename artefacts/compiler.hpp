#pragma once

// Building native kernels (.cpp with g++, .cu with nvcc) against the node's libtorch into
// loadable objects: a precompiled header per toolchain and flag set, and a content-addressed
// cache of built objects, published atomically (write, then rename) so that several processes
// can share one cache folder. Blocking: used by the compile pool's detached workers.

#include <string>
#include <vector>

#include "messages/records.hpp"
#include "process/sandbox.hpp"

namespace bb {

/// How kernels are built on this node. Defaults come from the build of bbcluster itself.
struct toolchain {
  std::string cxx;
  std::string nvcc;
  /// Flags for every kernel (-std, -O, -fPIC, the C++ ABI of libtorch).
  std::vector<std::string> flags;
  /// Include folders: the kernel header's, then libtorch's.
  std::vector<std::string> include_dirs;
  std::string torch_version;
  /// nvcc's -arch value ("sm_90", or "native": the GPU of this node).
  std::string cuda_arch = "native";
  /// Use a precompiled header for .cpp kernels.
  bool use_pch = true;
};

/// The toolchain bbcluster was built with (compiler, libtorch headers and version).
toolchain default_toolchain();

struct compile_settings {
  toolchain tools;
  /// Shared cache folder: objects/, pch/, tmp/.
  std::string cache_dir;
  /// Where full compiler logs go (the run folder's compile_logs/); created if missing.
  std::string log_dir;
  double timeout_s = 600.0;
  /// Whether this node can run CUDA kernels; a .cu on a node without is needs_cuda.
  bool has_cuda = false;
  /// The compiler's sandbox and limits (its memory: limits.max_data_bytes); each build adds
  /// its private folder, writable, and the headers it reads.
  sandbox_policy sandbox;
};

/// The cache key of an artefact: SHA-256 over its kind, entry and source, the flags and
/// include folders, the compiler's identity (`compiler_id`: its version text), the torch
/// version and, for .cu, the CUDA arch.
std::string cache_key(const artefact& a, const toolchain& tc, const std::string& compiler_id);

/// Builds `a` (kind cpp or cu) or finds it in the cache.
compile_outcome build_kernel(const artefact& a, const compile_settings& s);

/// Makes (or finds) the precompiled kernel header for this toolchain; returns the include
/// folder that holds it, or "" when it cannot be built (kernels then compile without it).
std::string ensure_pch(const compile_settings& s);

/// The first errors of a compiler log, at most `max_lines` lines.
std::string trim_compiler_log(const std::string& log, size_t max_lines = 20);

/// The default cache folder: $BBCLUSTER_CACHE, else $XDG_CACHE_HOME/bbcluster/kernels, else
/// ~/.cache/bbcluster/kernels.
std::string default_cache_dir();

} // namespace bb
