#pragma once

// The JIT cache: what Triton, TorchInductor and FlagGems compile while a Python kernel runs
// (cubins, launchers, generated code), kept per machine under $BBCLUSTER_HOME/jit so that the
// next run, the next runner and the next sweep on that machine do not compile it again.
//
// Kernels are untrusted, so no kernel ever writes to the store. A runner sees the store
// read-only and copies its kernel's entry into a folder of its own private /tmp before the
// kernel loads; the JIT libraries write there. After a job that ended well and left its runner
// untouched, the evaluator (outside the sandbox) copies what is new into that kernel's entry.
// An entry is keyed by the kernel's source hash, inside a folder keyed by the machine (GPU,
// driver, torch): a kernel can only ever add to its own entry, and what an entry holds runs
// under every check again on each use (the references never use these caches).

#include <cstdint>
#include <string>

#include "messages/records.hpp"

namespace bb {

/// The store's folder for runners that announced `where` (GPU, driver and torch build) under
/// `base`: a different machine, driver or torch never reuses another's entries. Triton's own
/// keys add its version, the target and the compiler options.
std::string jit_store_for(const std::string& base, const provenance& where);

/// The name of a kernel's entry in the store: the first 32 hex digits of its source hash; ""
/// for a hash that is not one (an aten kernel's "aten").
std::string jit_entry_name(const std::string& kernel_hash);

/// Bounds of what the store keeps.
struct jit_bounds {
  /// Bytes of one kernel's entry (Triton's files for a kernel of many configurations are a
  /// few MiB).
  uint64_t entry_bytes = uint64_t{256} << 20;
  /// Files and folders of one entry.
  size_t entry_files = 10000;
  /// Folders below the entry's top (Triton's and TorchInductor's layouts are a few deep).
  size_t depth = 8;
  /// Nothing is kept while the store's file system has less free space than this.
  uint64_t free_bytes = uint64_t{2} << 30;
};

/// What harvest_jit_cache copied.
struct jit_harvest {
  size_t files = 0;
  uint64_t bytes = 0;
  /// The entry's bytes after the harvest (what it held and what was copied).
  uint64_t entry_bytes = 0;
  /// Why it stopped before copying everything new ("" when it did not): the entry's bound.
  std::string stopped;
};

/// Copies the regular files under `from` that `to` lacks into `to` (each written whole: a
/// temporary file, then a rename, safe beside other evaluators harvesting the same entry).
/// `from` is an absolute path as seen from `root` (a sandbox's "/proc/<pid>/root"): every
/// folder on the way, from `root` down, is opened without following a link, so a link a
/// kernel put anywhere on the path or below it is never followed. Devices, links and
/// half-written files of the JIT libraries are passed over. Stops at the bounds (the entry's
/// bytes, files and depth) and copies nothing while the store's file system is short of free
/// space. A `from` that does not exist copies nothing. The entry's bytes are recorded beside it
/// (`<to>.bytes`) when anything was copied.
jit_harvest harvest_jit_cache(const std::string& root, const std::string& from, const std::string& to,
                              const jit_bounds& bounds = {});

/// The bytes of the store's entry `entry` as its last harvest recorded them (the file
/// `<entry>.bytes` beside it), counted from its files when there is no record.
uint64_t jit_entry_bytes(const std::string& entry);

/// Marks the entry `entry` as used now (its folder's time): the last to be trimmed. Nothing
/// when it does not exist.
void touch_jit_entry(const std::string& entry);

/// What trim_jit_store removed.
struct jit_trim {
  size_t entries = 0;
  uint64_t bytes = 0;
  /// The store's bytes after the trim.
  uint64_t held = 0;
};

/// Keeps the store `store` (one machine's folder of entries) under `max_bytes`: while its
/// entries hold more, the one used least recently (its folder's time) is removed, never
/// `keep`. An entry is renamed away before it is removed, so a runner seeding from it at that
/// moment copies all of it or finds none; trims of one store take turns (a lock file in it).
jit_trim trim_jit_store(const std::string& store, uint64_t max_bytes, const std::string& keep = "");

/// The store's folder, beside the kernels' entries, of FlagGems' tuning databases (what its
/// autotuner measured and chose per kernel and shape): one subfolder per slot that fed it.
/// Unlike an entry it is shared by every kernel of the machine: a kernel could write FlagGems'
/// database in its runner, so what it holds can steer a later FlagGems kernel to another of its
/// own configurations (a slower one, or a wrong one that the checks then fail), never time one.
inline constexpr const char* flag_gems_tuning_folder = "flaggems";

/// What harvest_tuning copied.
struct tuning_harvest {
  size_t files = 0;
  uint64_t bytes = 0;
  /// Why a database was not copied ("" when none was left out for a reason worth telling).
  std::string stopped;
};

/// Copies FlagGems' tuning databases, the regular files `TunedConfig_*.db` (letters, digits,
/// '_', '-', '.') directly in `from` (an absolute path seen from `root`, opened as
/// harvest_jit_cache opens it: no link followed), into the folder `to`, each written whole and
/// replacing the file of its name there. A database whose size and time are those of the copy
/// in `to` is passed over, as is one beside a journal (`-journal`, `-wal`: a transaction not
/// ended), one larger than `max_bytes`, a new one when `to` holds `max_files` already, and any
/// that would leave the file system of `to` less than `free_bytes` free.
tuning_harvest harvest_tuning(const std::string& root, const std::string& from, const std::string& to,
                              uint64_t max_bytes = uint64_t{16} << 20, uint64_t free_bytes = uint64_t{2} << 30,
                              size_t max_files = 8);

/// Copies the store's entry `from` into the runner's own folder `to` (made empty first):
/// regular files and folders only; `from` "" or absent leaves `to` empty. Returns "" or why
/// it could not; then `to` is left empty, never half copied.
std::string seed_jit_folder(const std::string& from, const std::string& to);

} // namespace bb
