#include "artefacts/parquet_cache.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "artefacts/sha256.hpp"
#include "process/subprocess.hpp"

namespace bb {

namespace fs = std::filesystem;

namespace {

bool read_whole(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// The last lines of a log, for an error message.
std::string tail(const std::string& text, size_t lines) {
  size_t at = text.size();
  while (at > 0 && (text[at - 1] == '\n' || text[at - 1] == ' '))
    --at;
  auto end = at;
  for (size_t n = 0; at > 0 && n < lines; --at)
    if (text[at - 1] == '\n' && ++n == lines)
      break;
  return text.substr(at, end - at);
}

} // namespace

parquet_conversion cached_parquet_jsonl(const std::string& parquet, const std::string& cache_dir,
                                        const std::string& python, const std::string& script) {
  parquet_conversion out;
  std::string bytes;
  if (!fs::is_regular_file(parquet) || !read_whole(parquet, bytes)) {
    out.error = "--data " + parquet + ": no such file or it cannot be read";
    return out;
  }
  auto key = sha256_hex(bytes);
  auto target = (fs::path(cache_dir) / (key + ".jsonl")).string();
  std::error_code ec;
  if (fs::is_regular_file(target, ec)) {
    out.jsonl = target;
    return out;
  }
  fs::create_directories(cache_dir, ec);
  if (ec) {
    out.error = "--data " + parquet + ": cannot make the parquet cache " + cache_dir + ": " + ec.message();
    return out;
  }
  auto log = (fs::path(cache_dir) / (key + ".log")).string();
  fs::remove(log, ec);
  auto run = run_process({python, script, parquet, target}, log, 600);
  if (!run.ok() || !fs::is_regular_file(target, ec)) {
    std::string text;
    read_whole(log, text);
    out.error = "--data " + parquet + ": cannot convert it (" + python + " " + script + " "
                + run.how + "): " + tail(text, 3);
    return out;
  }
  fs::remove(log, ec);
  out.jsonl = target;
  out.converted = true;
  return out;
}

std::string parquet_converter_path() {
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "bbcluster_parquet.py" : (self.parent_path() / "bbcluster_parquet.py").string();
}

} // namespace bb
