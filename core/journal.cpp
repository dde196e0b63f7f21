#include "core/journal.hpp"

#include <unistd.h>

namespace bb {

void to_json(nlohmann::json& j, const correctness_record& x) {
  j = {{"op_name", x.op_name},       {"args", x.args},
       {"is_correct", x.is_correct}, {"error_msg", x.error_msg},
       {"error_type", x.error_type}, {"traceback", x.traceback},
       {"max_abs_error", x.max_abs_error}, {"max_rel_error", x.max_rel_error},
       {"test_type", x.test_type}};
}

void from_json(const nlohmann::json& j, correctness_record& x) {
  j.at("op_name").get_to(x.op_name);
  j.at("args").get_to(x.args);
  j.at("is_correct").get_to(x.is_correct);
  j.at("error_msg").get_to(x.error_msg);
  j.at("error_type").get_to(x.error_type);
  j.at("traceback").get_to(x.traceback);
  j.at("max_abs_error").get_to(x.max_abs_error);
  j.at("max_rel_error").get_to(x.max_rel_error);
  j.at("test_type").get_to(x.test_type);
}

void to_json(nlohmann::json& j, const performance_record& x) {
  j = {{"op_name", x.op_name},
       {"args", x.args},
       {"speedup", x.speedup},
       {"benchmark_time_ms", x.benchmark_time_ms},
       {"reference_time_ms", x.reference_time_ms},
       {"error_msg", x.error_msg},
       {"successfully_ran", x.successfully_ran},
       {"test_type", x.test_type}};
}

void from_json(const nlohmann::json& j, performance_record& x) {
  j.at("op_name").get_to(x.op_name);
  j.at("args").get_to(x.args);
  j.at("speedup").get_to(x.speedup);
  j.at("benchmark_time_ms").get_to(x.benchmark_time_ms);
  j.at("reference_time_ms").get_to(x.reference_time_ms);
  j.at("error_msg").get_to(x.error_msg);
  j.at("successfully_ran").get_to(x.successfully_ran);
  j.at("test_type").get_to(x.test_type);
}

void to_json(nlohmann::json& j, const provenance& x) {
  j = {{"node", x.node},
       {"device", x.device},
       {"driver", x.driver},
       {"torch_version", x.torch_version},
       {"artefact_hash", x.artefact_hash}};
}

void from_json(const nlohmann::json& j, provenance& x) {
  j.at("node").get_to(x.node);
  j.at("device").get_to(x.device);
  j.at("driver").get_to(x.driver);
  j.at("torch_version").get_to(x.torch_version);
  j.at("artefact_hash").get_to(x.artefact_hash);
}

void to_json(nlohmann::json& j, const eval_result& x) {
  j = {{"job_id", x.job_id},
       {"attempt", x.attempt},
       {"op_name", x.op_name},
       {"outcome", x.outcome},
       {"detail", x.detail},
       {"correctness", x.correctness},
       {"performance", x.performance},
       {"provenance", x.where},
       {"wall_seconds", x.wall_seconds},
       {"flags", x.flags},
       {"runner_restarts", x.runner_restarts}};
  if (x.version > 0)
    j["version"] = x.version;
}

void from_json(const nlohmann::json& j, eval_result& x) {
  j.at("job_id").get_to(x.job_id);
  j.at("attempt").get_to(x.attempt);
  j.at("op_name").get_to(x.op_name);
  j.at("outcome").get_to(x.outcome);
  j.at("detail").get_to(x.detail);
  j.at("correctness").get_to(x.correctness);
  j.at("performance").get_to(x.performance);
  j.at("provenance").get_to(x.where);
  j.at("wall_seconds").get_to(x.wall_seconds);
  // Journals written before these fields existed still read.
  if (j.contains("flags"))
    j.at("flags").get_to(x.flags);
  if (j.contains("runner_restarts"))
    j.at("runner_restarts").get_to(x.runner_restarts);
  if (j.contains("version"))
    j.at("version").get_to(x.version);
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
  if (file_)
    std::fclose(file_);
}

bool journal_writer::open(const std::string& path) {
  // A journal cut short by a kill ends in half a line: the next line starts on its own.
  bool torn = false;
  if (std::FILE* in = std::fopen(path.c_str(), "rb")) {
    torn = std::fseek(in, -1, SEEK_END) == 0 && std::fgetc(in) != '\n';
    std::fclose(in);
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ && torn && (std::fputc('\n', file_) == EOF || std::fflush(file_) != 0))
    return false;
  return file_ != nullptr;
}

bool journal_writer::append(const eval_result& r, const std::string& event) {
  if (!file_)
    return false;
  auto line = journal_line(r, event);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size())
    return false;
  return std::fflush(file_) == 0;
}

} // namespace bb
