// Sandbox benchmark: what the sandbox adds to a runner's start. Starts bbrunner N times bare
// and N times in the sandbox a node gives its runners (alternating, so that the machine's load
// falls on both alike), from fork to the runner's hello, and prints the median of each and
// their difference (goal: under 50 ms more per start). Also /bin/true bare and sandboxed: the
// sandbox's own cost, without torch's load.
//
//   bench_sandbox [N]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <unistd.h>

#include "artefacts/compiler.hpp"
#include "cluster/config.hpp"
#include "programs/local_node.hpp"
#include "process/runner_supervisor.hpp"
#include "process/sandbox.hpp"
#include "process/subprocess.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double ms_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

} // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 10;
  if (auto why = bb::sandbox_unavailable(); !why.empty()) {
    std::fprintf(stderr, "bench_sandbox: no sandbox here: %s\n", why.c_str());
    return 1;
  }
  char tmpl[] = "/tmp/bench-sandbox-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  bb::settings s;
  auto runner = std::string(BB_BIN_DIR "/bbrunner");
  auto policy = bb::node_sandbox(s, dir, bb::default_cache_dir(), runner);
  policy.scratch = dir + "/scratch/slot0";
  std::filesystem::create_directories(policy.scratch);

  std::vector<double> bare, boxed, true_bare, true_boxed;
  for (int i = 0; i < n; ++i) {
    for (bool sandboxed : {false, true}) {
      bb::runner_spec spec;
      spec.program = runner;
      spec.log_path = dir + "/runner.log";
      spec.sandbox = policy;
      spec.sandbox.mode = sandboxed ? bb::sandbox_mode::required : bb::sandbox_mode::off;
      bb::runner_supervisor sup;
      auto start = clock_type::now();
      if (auto err = sup.start(spec, 120000); !err.empty()) {
        std::fprintf(stderr, "bench_sandbox: %s\n", err.c_str());
        return 1;
      }
      (sandboxed ? boxed : bare).push_back(ms_since(start));
      sup.stop();

      auto t = clock_type::now();
      auto p = policy;
      p.mode = sandboxed ? bb::sandbox_mode::required : bb::sandbox_mode::off;
      auto r = bb::run_process({"/bin/true"}, dir + "/true.log", 30, p);
      if (!r.ok()) {
        std::fprintf(stderr, "bench_sandbox: /bin/true %s\n", r.how.c_str());
        return 1;
      }
      (sandboxed ? true_boxed : true_bare).push_back(ms_since(t));
    }
  }
  std::printf("runner start (fork to hello), median of %d: bare %.1f ms, sandboxed %.1f ms: "
              "%+.1f ms (goal: under +50 ms)\n",
              n, median(bare), median(boxed), median(boxed) - median(bare));
  std::printf("/bin/true, median of %d: bare %.2f ms, sandboxed %.2f ms: %+.2f ms\n", n,
              median(true_bare), median(true_boxed), median(true_boxed) - median(true_bare));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
