#pragma once

// JSON forms of the records (nlohmann) and the run journal results.jsonl: one line per
// terminal job event, appended and flushed as results arrive; the source of truth for resume.

#include <string>

#include <sys/types.h>

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

/// Appends journal lines to a file, each handed to the OS whole before returning: a line that
/// cannot be written whole (a full disk) is cut off again, so the file holds whole lines only.
class journal_writer {
public:
  journal_writer() = default;
  journal_writer(const journal_writer&) = delete;
  journal_writer& operator=(const journal_writer&) = delete;
  ~journal_writer();

  /// Opens `path` for appending, ending a torn last line (a killed sweep's) first; false on
  /// failure (error() says why).
  bool open(const std::string& path);

  /// Writes one line for `r`: event "job_finished" (an operator's terminal result),
  /// "shard_finished" (a shard's terminal result; its operator's job_finished line, merged
  /// from its shards, follows when all are terminal), "job_requeued" (an attempt that ended
  /// in a runner or node fault and goes back to the queue) or "version_evaluated" (every
  /// evaluated kernel version of a generative backend; the one that stands also gets its
  /// job_finished line); false on a write error (error() says why).
  bool append(const eval_result& r, const std::string& event = "job_finished");

  bool is_open() const {
    return fd_ >= 0;
  }

  /// The last failure: "cannot append to PATH: No space left on device".
  const std::string& error() const {
    return error_;
  }

private:
  bool write_whole(const std::string& text);
  bool fail(const char* what);

  int fd_ = -1;
  /// The file's size after the last whole line.
  off_t size_ = 0;
  std::string path_;
  std::string error_;
};

/// One journal line as JSON text (no newline).
std::string journal_line(const eval_result& r, const std::string& event = "job_finished");

/// Parses a journal line back into a result; throws nlohmann::json::exception on bad input.
eval_result parse_journal_line(const std::string& line);

} // namespace bb
