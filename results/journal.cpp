#include "results/journal.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bb {

void to_json(nlohmann::json& j, const outcome& x) {
  j = to_string(x);
}

void from_json(const nlohmann::json& j, outcome& x) {
  if (!from_string(j.get<std::string>(), x))
    throw nlohmann::json::other_error::create(501, "unknown outcome " + j.dump(), &j);
}

namespace fields {
// The records' JSON forms are made from their field lists (messages/records.hpp); a field
// that came after a journal was written takes its default (bb::from_json below requires the
// ones that were always there).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(correctness_record, BB_FIELDS_CORRECTNESS_RECORD)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(performance_record, BB_FIELDS_PERFORMANCE_RECORD)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(provenance, BB_FIELDS_PROVENANCE)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(shard_span, BB_FIELDS_SHARD_SPAN)
// bb::to_json below names eval_result's `where` "provenance" in the file, as the journal
// always has.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(eval_result, BB_FIELDS_EVAL_RESULT)
} // namespace fields

namespace {

// Throws as a hand-written reader would when a field every journal has is missing.
void require(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (auto k : keys)
    (void)j.at(k);
}

} // namespace

void to_json(nlohmann::json& j, const correctness_record& x) {
  fields::to_json(j, x);
}

void from_json(const nlohmann::json& j, correctness_record& x) {
  require(j, {"op_name", "args", "is_correct", "error_msg", "error_type", "traceback",
              "max_abs_error", "max_rel_error"});
  fields::from_json(j, x);
}

void to_json(nlohmann::json& j, const performance_record& x) {
  fields::to_json(j, x);
}

void from_json(const nlohmann::json& j, performance_record& x) {
  require(j, {"op_name", "args", "speedup", "benchmark_time_ms", "reference_time_ms", "error_msg",
              "successfully_ran"});
  fields::from_json(j, x);
}

void to_json(nlohmann::json& j, const provenance& x) {
  fields::to_json(j, x);
}

void from_json(const nlohmann::json& j, provenance& x) {
  require(j, {"node", "device", "driver", "torch_version", "artefact_hash"});
  fields::from_json(j, x);
}

void to_json(nlohmann::json& j, const shard_span& x) {
  fields::to_json(j, x);
}

void from_json(const nlohmann::json& j, shard_span& x) {
  fields::from_json(j, x);
}

void to_json(nlohmann::json& j, const eval_result& x) {
  fields::to_json(j, x);
  j["provenance"] = std::move(j["where"]);
  j.erase("where");
  if (x.version == 0)
    j.erase("version");
  // An operator evaluated as one job has the journal line it always had.
  if (!x.shard.is_part())
    j.erase("shard");
  if (x.shards == 0)
    j.erase("shards");
}

void from_json(const nlohmann::json& j, eval_result& x) {
  require(j, {"job_id", "attempt", "op_name", "outcome", "detail", "correctness", "performance",
              "provenance", "wall_seconds"});
  auto renamed = j;
  if (renamed.contains("provenance")) {
    renamed["where"] = std::move(renamed["provenance"]);
    renamed.erase("provenance");
  }
  fields::from_json(renamed, x);
}

std::string journal_line(const eval_result& r, const std::string& event) {
  nlohmann::json j = r;
  j["event"] = event;
  // Replace invalid UTF-8 (kernel output in messages) instead of throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

eval_result parse_journal_line(const std::string& line) {
  return nlohmann::json::parse(line).get<eval_result>();
}

journal_writer::~journal_writer() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool journal_writer::open(const std::string& path) {
  path_ = path;
  // Read and write: the torn-line check reads the last byte.
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0)
    return fail("cannot open");
  size_ = st.st_size;
  // A journal cut short by a kill ends in half a line: the next line starts on its own.
  char last = '\n';
  if (size_ > 0 && ::pread(fd_, &last, 1, size_ - 1) != 1)
    last = '\n';
  return last == '\n' || write_whole("\n");
}

bool journal_writer::append(const eval_result& r, const std::string& event) {
  if (fd_ < 0)
    return false;
  return write_whole(journal_line(r, event) + "\n");
}

bool journal_writer::write_whole(const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    auto n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      // No torn line stays behind: the next one starts where this one did.
      int why = errno;
      if (done > 0)
        (void)::ftruncate(fd_, size_);
      errno = why;
      return fail("cannot append to");
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<off_t>(text.size());
  return true;
}

bool journal_writer::fail(const char* what) {
  error_ = std::string(what) + " " + path_ + ": " + std::strerror(errno);
  return false;
}

} // namespace bb
