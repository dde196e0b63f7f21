#pragma once

// Where a sweep's time went: each job's phases (docs/architecture.md, "Profile") summed per
// evaluator slot, printed as a short table at the end of a sweep and kept in profile.json.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/records.hpp"

namespace bb {

/// The phases in the order they are shown: the evaluator's runner start, the runner's own
/// steps, the timer's two sides, moving results back, and waiting for work.
const std::vector<std::string>& profile_phases();

/// The reporter's own work, which must grow linearly with the operators: the CPU seconds of
/// its thread while it handled messages, the operators' results it recorded, and how often it
/// rewrote the growing reports and in how many seconds.
// Each record's fields, once: profile.json is made from them (profile_json).
#define BB_FIELDS_REPORTER_LOAD cpu_seconds, results, rewrites, rewrite_seconds
struct reporter_load {
  double cpu_seconds = 0.0;
  size_t results = 0;
  size_t rewrites = 0;
  double rewrite_seconds = 0.0;
};

#define BB_FIELDS_SWEEP_PROFILE slots, total, jobs, reporter
struct sweep_profile {
  /// Seconds per phase, per slot ("node/slot").
  std::map<std::string, std::map<std::string, double>> slots;
  /// Seconds per phase over all slots (total_seconds in profile.json).
  std::map<std::string, double> total;
  size_t jobs = 0;
  reporter_load reporter;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(reporter_load, BB_FIELDS_REPORTER_LOAD)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(sweep_profile, BB_FIELDS_SWEEP_PROFILE)

/// Adds the phases of one evaluation (a job, or a shard of an operator) under its slot.
void add_to_profile(sweep_profile& p, const eval_result& r);

/// Sums the phases of `results` per slot and in total.
sweep_profile make_profile(const std::vector<eval_result>& results);

/// The CPU seconds this process has used so far, all its threads together.
double process_cpu_seconds();

/// The CPU seconds the calling thread has used so far.
double thread_cpu_seconds();

/// "reporter: 0.84 s CPU for 679 results (1.24 ms each), 31 rewrites of the growing reports
/// (0.40 s)".
std::string format_reporter_load(const reporter_load& r);

/// The table printed at the end of a sweep: a row per slot, a column per phase, and the
/// largest phases over the whole sweep with their shares, then the reporter's load when it
/// recorded results. `kept_in` names the file that holds them all (profile.json) in the
/// heading; "" when none was written.
std::string format_profile(const sweep_profile& p, const std::string& kept_in);

/// profile.json: the same numbers, per slot and in total, and the reporter's load.
nlohmann::json profile_json(const sweep_profile& p);

} // namespace bb
