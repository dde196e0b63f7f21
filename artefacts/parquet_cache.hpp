#pragma once

// BackendBench's .parquet as the torchbench suite's data: converted once per file content
// into a .jsonl (one row a line, every column kept) in a cache keyed by the content's
// SHA-256, by python/bbcluster_parquet.py with pyarrow; later runs read the cached file.

#include <string>

namespace bb {

struct parquet_conversion {
  /// The cached .jsonl; empty on error.
  std::string jsonl;
  /// True when this call converted the file (a cache miss).
  bool converted = false;
  /// Why there is none, naming the file.
  std::string error;
};

/// The .jsonl of `parquet` under `cache_dir`, converting it with `python` running `script`
/// when the cache lacks it. Safe between processes: a conversion is written to a temporary
/// file and renamed.
parquet_conversion cached_parquet_jsonl(const std::string& parquet, const std::string& cache_dir,
                                        const std::string& python, const std::string& script);

/// bbcluster_parquet.py beside the running program.
std::string parquet_converter_path();

} // namespace bb
