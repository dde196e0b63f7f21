#pragma once

// JSON forms of the records (nlohmann) and the run journal results.jsonl: one line per
// terminal job event, appended and flushed as results arrive; the source of truth for resume.

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "messages/records.hpp"

namespace bb {

void to_json(nlohmann::json& j, const outcome& x);
void from_json(const nlohmann::json& j, outcome& x);
void to_json(nlohmann::json& j, const correctness_record& x);
void from_json(const nlohmann::json& j, correctness_record& x);
void to_json(nlohmann::json& j, const performance_record& x);
void from_json(const nlohmann::json& j, performance_record& x);
void to_json(nlohmann::json& j, const provenance& x);
void from_json(const nlohmann::json& j, provenance& x);
void to_json(nlohmann::json& j, const shard_span& x);
void from_json(const nlohmann::json& j, shard_span& x);
void to_json(nlohmann::json& j, const eval_result& x);
void from_json(const nlohmann::json& j, eval_result& x);

/// Appends journal lines to a file, flushing each one to the OS before returning.
class journal_writer {
public:
  journal_writer() = default;
  journal_writer(const journal_writer&) = delete;
  journal_writer& operator=(const journal_writer&) = delete;
  ~journal_writer();

  /// Opens `path` for appending, ending a torn last line (a killed sweep's) first; false (and
  /// errno set) on failure.
  bool open(const std::string& path);

  /// Writes one line for `r`: event "job_finished" (an operator's terminal result),
  /// "shard_finished" (a shard's terminal result; its operator's job_finished line, merged
  /// from its shards, follows when all are terminal), "job_requeued" (an attempt that ended
  /// in a runner or node fault and goes back to the queue) or "version_evaluated" (every
  /// evaluated kernel version of a generative backend; the one that stands also gets its
  /// job_finished line); false on a write error.
  bool append(const eval_result& r, const std::string& event = "job_finished");

  bool is_open() const {
    return file_ != nullptr;
  }

private:
  std::FILE* file_ = nullptr;
};

/// One journal line as JSON text (no newline).
std::string journal_line(const eval_result& r, const std::string& event = "job_finished");

/// Parses a journal line back into a result; throws nlohmann::json::exception on bad input.
eval_result parse_journal_line(const std::string& line);

} // namespace bb
