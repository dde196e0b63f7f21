// BackendBench's command-line flags that are not plain settings, and what each means here.
// BackendBench's main.py is the reference: every flag it accepts is taken, or refused with
// the reason.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "artefacts/parquet_cache.hpp"
#include "artefacts/sha256.hpp"
#include "programs/cli.hpp"
#include "process/subprocess.hpp"

namespace bb::program {

void add_backendbench_flags(CLI::App& app, flags& f) {
  app.add_option("--num-workers", f.num_workers,
                 "evaluator slots, as BackendBench's worker processes (same as --devices)")
    ->check(CLI::PositiveNumber);
  app.add_flag("--daemon,!--no-daemon", f.daemon,
               "accepted for BackendBench; bbcluster's evaluators run kernels in bbrunner "
               "processes that may start their own (Helion's autotuner), so there is nothing to "
               "switch");
  app.add_flag("--check-overhead-dominated-ops", f.overhead_dominated,
               "torchbench: only the rows the data marks is_overhead_dominated_op");
  app.add_option("--load_cpp_source", f.load_cpp_source,
                 "accepted for BackendBench: false only (a .cu kernel exports its entry point "
                 "itself, no C++ companion source is read)");
  app.add_option("--harness", f.harness,
                 "accepted for BackendBench: cuda, triton or cpu; bbcluster times with CUDA "
                 "events on GPU slots and the CPU timer on CPU slots")
    ->check(CLI::IsMember({"cuda", "triton", "cpu"}));
  app.add_option("--dtype", f.dtype,
                 "opinfo: the samples' dtype (default bfloat16 with a GPU, as BackendBench, "
                 "float32 without)")
    ->check(CLI::IsMember({"bfloat16", "float16", "float32", "float64"}));
}

namespace {


// The opinfo suite's samples as bbcluster_opinfo.py selects them, on this machine's device
// kind, into a file make_plan reads; "" or why not.
std::string plan_opinfo(flags& f) {
  bool gpu = count_gpus() > 0;
  auto device = gpu ? "cuda" : "cpu";
  auto dtype = !f.dtype.empty() ? f.dtype : gpu ? "bfloat16" : "float32";
  std::vector<std::string> argv{build_python(), beside_program("bbcluster_opinfo.py"), "plan",
                                device, dtype, "0"};
  std::string key = std::string(device) + " " + dtype;
  std::vector<std::string> tokens;
  std::stringstream ops(f.ops);
  for (std::string t; std::getline(ops, t, ',');)
    if (!t.empty()) {
      tokens.push_back(t);
      key += " " + t;
    }
  auto dir = project_home() + "/opinfo";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto out = dir + "/" + sha256_hex(key).substr(0, 16) + ".json";
  argv.push_back(out);
  // Kept per torch build, device model, OpInfo database and dtype: only the first run on a
  // kind of machine selects.
  argv.push_back("--cache");
  argv.push_back(dir + "/cache");
  argv.insert(argv.end(), tokens.begin(), tokens.end());
  auto log = out + ".log";
  std::filesystem::remove(log, ec);
  spdlog::info("bbcluster: opinfo: {} samples on {} as BackendBench selects them ({})", dtype, device,
               tokens.empty() ? std::string("every OpInfo") : f.ops);
  auto run = run_process(argv, log, 3600);
  if (!run.ok()) {
    std::ifstream in(log);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty())
        last = line;
    return "--suite opinfo: cannot select the samples (" + run.how + "): " + last;
  }
  try {
    std::ifstream in(out);
    auto selection = nlohmann::json::parse(in);
    if (selection.value("cached", false))
      spdlog::info("bbcluster: opinfo: the selection made on this kind of machine before, from {}/cache",
                   dir);
    else
      spdlog::info("bbcluster: opinfo: selected in {:.1f} s, kept in {}/cache for the next run",
                   selection.value("seconds", 0.0), dir);
  } catch (const nlohmann::json::exception&) {
    // make_plan reads it again and names what is wrong with it.
  }
  f.data = out;
  return "";
}

std::string parquet_cache_dir() {
  return project_home() + "/parquet";
}

} // namespace

std::string apply_backendbench_flags(const CLI::App& app, flags& f, settings& s) {
  if (f.suite == "facto")
    return "--suite facto: BackendBench's FACTO suite draws inputs from the facto package "
           "(pytorch-labs/FACTO, not on PyPI) per operator and dtype; bbcluster does not build "
           "them. Run --suite opinfo or torchbench";
  if (f.suite != "opinfo" && !f.dtype.empty())
    return "--dtype chooses the opinfo suite's dtype; the " + f.suite + " suite's inputs name theirs";
  if (f.suite == "opinfo") {
    if (!f.data.empty())
      return "--suite opinfo builds its samples from PyTorch's OpInfo database; it takes no --data";
    if (auto err = plan_opinfo(f); !err.empty())
      return err;
  }
  if (f.suite != "torchbench") {
    // As BackendBench: these select inputs of the torchbench suite only.
    if (f.overhead_dominated)
      return "--check-overhead-dominated-ops is only supported for the torchbench suite";
  }
  if (f.num_workers > 0) {
    if (f.devices > 0 && f.devices != f.num_workers)
      return "--num-workers " + std::to_string(f.num_workers) + " and --devices "
             + std::to_string(f.devices) + " disagree (both are evaluator slots)";
    f.devices = f.num_workers;
  }
  if (app.count("--daemon"))
    spdlog::debug("bbcluster: --daemon/--no-daemon has no effect: kernels run in bbrunner "
                  "processes, which may start processes of their own");
  if (!f.load_cpp_source.empty() && f.load_cpp_source != "false" && f.load_cpp_source != "False"
      && f.load_cpp_source != "0")
    return "--load_cpp_source " + f.load_cpp_source
           + ": bbcluster reads one file per kernel; a .cu kernel exports its entry point with "
             "BBCLUSTER_EXPORT_KERNEL from <bbcluster/kernel.h> and needs no C++ companion "
             "source (see README, Kernels from a directory)";
  if (f.backend == "llm-relay") {
    // BackendBench's relay is a server on this machine's port 11434; bbcluster talks to it
    // as an OpenAI-compatible chat completions endpoint.
    if (!f.llm_provider.empty() && f.llm_provider != "openai")
      return "--backend llm-relay speaks OpenAI's chat completions; --llm-provider "
             + f.llm_provider + " does not go with it (use --backend llm)";
    f.backend = "llm";
    f.llm_provider = "openai";
    if (f.llm_base_url.empty() && s.llm_base_url.empty())
      f.llm_base_url = default_relay_url;
    if (f.llm_model.empty() && s.llm_model.empty())
      f.llm_model = "claude-sonnet-4-20250514";
  }
  if (f.data.size() > 8 && f.data.compare(f.data.size() - 8, 8, ".parquet") == 0) {
    auto script = parquet_converter_path();
    auto got = cached_parquet_jsonl(f.data, parquet_cache_dir(), build_python(), script);
    if (!got.error.empty())
      return got.error;
    spdlog::info("bbcluster: {} read as {}{}", f.data, got.jsonl,
                 got.converted ? " (converted now, once for this content)" : " (cached)");
    f.data = got.jsonl;
  }
  return "";
}

} // namespace bb::program
