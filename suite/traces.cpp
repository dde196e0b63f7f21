#include "suite/traces.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "suite/args.hpp"

namespace bb::traces {

namespace fs = std::filesystem;

namespace {

bool read_whole(const fs::path& p, std::string& text) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return false;
  std::stringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return "";
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

} // namespace

trace_loader::trace_loader() {
  out_.loaded.name = "torchbench";
}

trace_loader::trace_loader(row_filter filter) : trace_loader() {
  filter_ = filter;
}

// `origin` is "file:line" for error messages, `column0` the 0-based column of the call text
// in that line, so parse errors point into the line.
void trace_loader::add(std::string op_name, const std::string& call_text,
                       const std::string& origin, size_t column0) {
  if (op_name == "aten.sum.SymInt")
    op_name = "aten.sum.dim_IntList";
  auto parsed = args::parse_call(call_text);
  if (auto* e = std::get_if<args::parse_error>(&parsed)) {
    error(origin + ":" + std::to_string(column0 + e->column) + ": expected "
                          + e->expected + ", found " + e->found);
    return;
  }
  ++out_.lines;
  std::string why;
  if (is_skipped_by_backendbench(op_name, why)) {
    if (skipped_.insert(op_name).second)
      out_.skipped.push_back(op_name + ": " + why);
    return;
  }
  auto [it, fresh] = index_.emplace(op_name, out_.loaded.ops.size());
  if (fresh)
    out_.loaded.ops.push_back(op_inputs{op_name, {}, {}});
  if (!seen_.insert({op_name, call_text}).second)
    return;
  out_.loaded.ops[it->second].correctness.push_back(call_text);
  out_.loaded.ops[it->second].performance.push_back(call_text);
}

load_report trace_loader::finish() {
  return std::move(out_);
}

void trace_loader::error(const std::string& what) {
  out_.errors.push_back(printable(what));
}

void trace_loader::add_trace_text(const std::string& text, const std::string& origin) {
  auto& out = out_;
  ++out.files;
  std::istringstream in(text);
  std::string op;
  size_t number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    auto where = origin + ":" + std::to_string(number);
    auto line = trim(raw);
    if (line.empty() || line[0] == '#')
      continue;
    if (line.rfind("Operator:", 0) == 0) {
      op = trim(line.substr(9));
      if (op.empty())
        error(where + ":10: expected an operator name after 'Operator:'");
      continue;
    }
    if (line.rfind("cnt:", 0) != 0) {
      error(where + ":1: expected 'Operator: NAME' or 'cnt: N, (ARGS, KWARGS)', found '"
                           + line.substr(0, 24) + "'");
      continue;
    }
    if (op.empty()) {
      error(where + ":1: a 'cnt:' line before any 'Operator:' line");
      continue;
    }
    // "cnt: N, (...)": the call starts after the first comma.
    auto lead = raw.find_first_not_of(" \t");
    auto comma = raw.find(',', lead);
    if (comma == std::string::npos) {
      error(where + ":" + std::to_string(raw.size() + 1)
                           + ": expected ', (ARGS, KWARGS)' after the count");
      continue;
    }
    auto call_start = raw.find_first_not_of(" \t", comma + 1);
    if (call_start == std::string::npos) {
      error(where + ":" + std::to_string(raw.size() + 1)
                           + ": expected '(ARGS, KWARGS)', found end of line");
      continue;
    }
    auto call = raw.substr(call_start);
    while (!call.empty() && (call.back() == '\r' || call.back() == ' '))
      call.pop_back();
    // A trace line carries no is_overhead_dominated_op: BackendBench's filter drops it.
    if (filter_.overhead_dominated_only) {
      ++out.not_overhead_rows;
      continue;
    }
    add(op, call, where, call_start);
  }
}

void trace_loader::add_jsonl_text(const std::string& text, const std::string& origin) {
  auto& out = out_;
  ++out.files;
  std::istringstream in(text);
  size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    auto where = origin + ":" + std::to_string(number);
    if (trim(line).empty())
      continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(nonfinite_to_null(line));
    } catch (const nlohmann::json::parse_error& e) {
      error(where + ":" + std::to_string(e.byte) + ": expected a JSON object ("
                           + std::string(e.what()) + ")");
      continue;
    }
    if (!row.is_object() || !row.contains("op_name") || !row["op_name"].is_string()
        || !row.contains("args") || !row["args"].is_string()) {
      error(where + ":1: expected an object with string fields \"op_name\" and \"args\"");
      continue;
    }
    auto flag = [&](const char* key) {
      return row.contains(key) && row[key].is_boolean() && row[key].get<bool>();
    };
    // BackendBench's order: the overhead filter first, then included_in_benchmark.
    if (filter_.overhead_dominated_only && !flag("is_overhead_dominated_op")) {
      ++out.not_overhead_rows;
      continue;
    }
    // BackendBench's data holds a Python bool here (dataset_filters.py), written as true or
    // false; anything else is not its data, and neither taking nor leaving the row is safe.
    auto included = row.find("included_in_benchmark");
    if (included != row.end() && !included->is_boolean()) {
      auto column = line.find("\"included_in_benchmark\"");
      auto value = included->dump(-1, ' ', true);
      if (value.size() > 40)
        value = value.substr(0, 37) + "...";
      error(where + ":" + std::to_string(column == std::string::npos ? 1 : column + 1)
            + ": \"included_in_benchmark\" must be true or false, as in BackendBench's data, not "
            + value);
      continue;
    }
    std::vector<std::string> reasons;
    if (included != row.end()) {
      if (!included->get<bool>()) {
        auto& why = row.contains("why_excluded") ? row["why_excluded"] : row;
        if (why.is_array())
          for (auto& r : why)
            if (r.is_string())
              reasons.push_back(r.get<std::string>());
        if (why.is_string() && !why.get<std::string>().empty())
          reasons.push_back(why.get<std::string>());
        if (reasons.empty())
          reasons.push_back("(no reason given)");
      }
    } else if (flag("is_synthetic")) {
      // Rows without the column: BackendBench's dataset filter leaves synthetic rows out.
      reasons.push_back("Synthetic ops are not supported in the official benchmark yet");
    }
    if (!reasons.empty()) {
      ++out.excluded_rows;
      ++out.excluded_by_op[row["op_name"].get<std::string>()];
      for (auto& r : reasons)
        ++out.excluded_reasons[r];
      continue;
    }
    add(row["op_name"].get<std::string>(), row["args"].get<std::string>(), where, 0);
  }
}

load_report load(const std::string& path, row_filter filter) {
  trace_loader loader(filter);
  auto& out = loader.report();
  std::error_code ec;
  fs::path root(path);
  if (!fs::exists(root, ec)) {
    out.fatal = "--data " + path + ": no such file or folder";
    return out;
  }
  std::vector<fs::path> files;
  if (fs::is_directory(root, ec)) {
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
         it.increment(ec))
      if (it->is_regular_file() && (it->path().extension() == ".txt" || it->path().extension() == ".jsonl"))
        files.push_back(it->path());
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      out.fatal = "--data " + path + ": no trace files (*.txt, *.jsonl) in this folder";
      return out;
    }
  } else {
    files.push_back(root);
  }
  for (auto& f : files) {
    if (f.extension() == ".parquet") {
      out.fatal = "--data " + f.string() + ": a .parquet is read by bbcluster's command line "
                  "(converted once into a .jsonl cache); give the file, not a folder holding it";
      break;
    }
    std::string text;
    if (!read_whole(f, text)) {
      out.fatal = "--data " + f.string() + ": cannot read the file";
      break;
    }
    if (f.extension() == ".jsonl")
      loader.add_jsonl_text(text, f.string());
    else
      loader.add_trace_text(text, f.string());
  }
  return loader.finish();
}

namespace {

void keep_by_size(suite& s, size_t topn, bool smallest) {
  for (auto& op : s.ops) {
    auto& inputs = op.correctness;
    std::vector<std::pair<int64_t, std::string>> sized;
    for (auto& text : inputs) {
      auto parsed = args::parse_call(text);
      auto bytes = std::holds_alternative<args::call>(parsed)
                     ? args::total_tensor_bytes(std::get<args::call>(parsed))
                     : 0;
      sized.emplace_back(bytes, text);
    }
    // As BackendBench: sorted(reverse=True) on (bytes, args text).
    std::sort(sized.begin(), sized.end(),
              [](const auto& a, const auto& b) { return a > b; });
    if (smallest)
      std::reverse(sized.begin(), sized.end());
    if (topn > 0 && sized.size() > topn)
      sized.resize(topn);
    inputs.clear();
    for (auto& [bytes, text] : sized)
      inputs.push_back(std::move(text));
    op.performance = inputs;
  }
}

} // namespace

void keep_largest(suite& s, size_t topn) {
  keep_by_size(s, topn, false);
}

void keep_smallest(suite& s, size_t topn) {
  keep_by_size(s, topn, true);
}

std::string missing_data_help() {
  return "the torchbench suite needs --data PATH: a trace file (.txt, 'Operator:' and 'cnt:' "
         "lines), a folder of them, a .jsonl with one {\"op_name\", \"args\", "
         "\"included_in_benchmark\"} object a line, or BackendBench's own file: the dataset "
         "GPUMODE/backendbench_tests on Hugging Face, backend_bench_problems.parquet, given as it "
         "is (read with pyarrow, which scripts/setup.sh installs)";
}


std::string nonfinite_to_null(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size())
        out += line[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool word_start = i == 0 || !std::isalnum(static_cast<unsigned char>(line[i - 1]));
    auto at = [&](const char* word) { return line.compare(i, std::strlen(word), word) == 0; };
    if (word_start && at("-Infinity")) {
      out += "null";
      i += 8;
    } else if (word_start && at("Infinity")) {
      out += "null";
      i += 7;
    } else if (word_start && at("NaN")) {
      out += "null";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

} // namespace bb::traces

namespace bb::traces {

// BackendBench's UNSUPPORTED_OPERATORS (op_categories.py), matched as it matches them: a
// plain substring of the full operator name ("index" drops index_select, index_put, ...).
bool is_skipped_by_backendbench(const std::string& op_name, std::string& why) {
  static const char* const unsupported[] = {
    "embedding",          "scatter",
    "gather",             "index",
    "nll_loss",           "im2col_backward",
    "col2im_backward",    "native_layer_norm_backward",
    "upsample_nearest2d_backward.vec", "upsample_bilinear2d_backward.vec",
    "_cudnn_rnn_backward.default",     "_fft_c2c.default",
    "_cudnn_rnn.default"};
  for (auto* s : unsupported)
    if (op_name.find(s) != std::string::npos) {
      why = std::string("skipped as BackendBench's torchbench suite skips it (UNSUPPORTED_OPERATORS: '")
            + s + "')";
      return true;
    }
  return false;
}

} // namespace bb::traces
