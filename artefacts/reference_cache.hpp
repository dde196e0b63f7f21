#pragma once

// The reference-time cache: aten's timing of one input, kept per (operator, input, device,
// driver, torch version, timer settings) in a folder that sweeps and campaigns share, so that
// a later sweep on the same kind of device, or the next version of a generative campaign,
// times aten only as a short calibration (timing.reference_calibration of the calls): the
// figure of that run is what counts, the cached one shows its drift and sizes shards. Any part of
// the key that differs means a full measurement. Entries are files written whole (write, then
// rename): safe between processes.

#include <optional>
#include <string>
#include <vector>

#include "messages/records.hpp"
#include "messages/runner_protocol.hpp"
#include "suite/shards.hpp"

namespace bb {

// The fields of a cache file, once: its JSON is made from them.
#define BB_FIELDS_REFERENCE_ENTRY key, mean_ms, round_means_ms
/// One file of the reference-time cache: the reference's timing under its key (the key's
/// JSON text, kept whole so that a hash collision is found out).
struct reference_entry {
  std::string key;
  double mean_ms = 0.0;
  std::vector<double> round_means_ms;
};

/// A cache file's text, and back (throws nlohmann::json's exceptions on a bad or torn file).
std::string reference_entry_json(const reference_entry& e);
reference_entry parse_reference_entry(const std::string& text);

class reference_cache {
public:
  /// A cache in `dir` (created when first written); an empty `dir` is a cache that holds
  /// nothing and keeps nothing.
  explicit reference_cache(std::string dir = "") : dir_(std::move(dir)) {
  }

  bool enabled() const {
    return !dir_.empty();
  }

  /// The key of one input's reference timing on the device `where` describes, with the
  /// timer settings of `opts`. On a CPU the node's name is part of the key (a CPU's name is
  /// not in the provenance).
  static std::string key(const std::string& op_name, const std::string& call_text,
                         const provenance& where, const runner_options& opts);

  /// The timing stored under `key`, if any (a torn or foreign file counts as none).
  std::optional<cached_reference> find(const std::string& key) const;

  /// Stores `timing` under `key`; false when the folder cannot be written.
  bool store(const std::string& key, const cached_reference& timing) const;

  /// ~/.cache/bbcluster/reference_times, or $BBCLUSTER_CACHE/reference_times.
  static std::string default_dir();

  /// Every reference call time (ms) the cache holds for slots of `device` ("cpu" or "cuda"),
  /// by (operator, input), whatever the device's name: what a sweep's shards are sized by
  /// where the cache has them.
  known_call_times call_times(const std::string& device) const;

private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

/// Looks up each performance input of `job` and fills job.cached_references with the hits.
void attach_cached_references(eval_job& job, const reference_cache& cache, const provenance& where,
                              const runner_options& opts);

/// Stores the reference timings `result` measured for the cache (its performance records with
/// round means: the reference timed in full here, or a calibration that found the cached
/// figure stale), then drops them from the records: the reports do not carry them.
void keep_measured_references(eval_result& result, const eval_job& job, const reference_cache& cache,
                              const runner_options& opts);

} // namespace bb
