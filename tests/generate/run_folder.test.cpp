#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "artefacts/kernel_dir.hpp"
#include "generate/run_folder.hpp"
#include "support.hpp"

using namespace bb;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  return bb::test::read_file(p.string());
}

} // namespace

TEST_CASE("a run folder holds versions, sessions and summaries in KernelAgent's layout", "[generate]") {
  bb::test::temp_dir tmp;
  run_folder f;
  REQUIRE(f.create(tmp.path, "kernel_agent", {{"KernelAgent workers", "4"}},
                   "bbcluster --backend kernel_agent").empty());
  auto root = fs::path(f.path());
  CHECK(root.filename().string().rfind("kernel_agent_run_", 0) == 0);
  CHECK(fs::is_directory(root / "agent_logs"));
  CHECK_THAT(slurp(root / "README.md"), Catch::Contains("--backend directory"));
  // A second campaign in the same second gets its own folder.
  run_folder g;
  REQUIRE(g.create(tmp.path, "kernel_agent", {}, "x").empty());
  CHECK(g.path() != f.path());

  std::string err;
  auto v1 = f.write_version("relu__default", 1, kernel_kind::py, "def relu__default_kernel_impl(x):\n    return x\n", err);
  REQUIRE(err.empty());
  CHECK(v1 == (root / "relu__default" / "relu__default_implementation_v1.py").string());
  // KernelAgent's session name is kept whole, as BackendBench's KernelAgent integration keeps
  // it: <folder>_session_session_<date>_<time>_<microseconds>.
  auto session = root / "agent_logs" / "session_20260114_152250_994449";
  fs::create_directories(session / "worker_0");
  std::ofstream(session / "kernel.py") << "x";
  auto kept = f.preserve_session("relu__default", session.string(), err);
  CHECK(kept == "relu__default_session_session_20260114_152250_994449");
  CHECK(fs::exists(root / kept / "kernel.py"));
  CHECK_FALSE(fs::exists(session));
  // A session in the run's own folder of agent_logs/: that folder goes once it is empty.
  auto own = root / "agent_logs" / "tanh__default_v1";
  fs::create_directories(own / "session_20260114_152251_1");
  CHECK(f.preserve_session("tanh__default", (own / "session_20260114_152251_1").string(), err)
        == "tanh__default_session_session_20260114_152251_1");
  CHECK_FALSE(fs::exists(own));
  CHECK(f.preserve_session("relu__default", "/nonexistent/session_x", err).empty());
  CHECK_THAT(err, Catch::Contains("does not exist"));

  op_summary s;
  s.op_name = "aten.relu.default";
  s.folder = "relu__default";
  s.versions.push_back({1, "relu__default_implementation_v1.py", "correct, speedup 1.20x", "agent worker 0, 1 rounds", 2.5});
  s.status = "passed";
  s.final_version = 1;
  s.why = "correct, speedup 1.20x";
  s.sessions.push_back(kept);
  REQUIRE(f.write_op_summary(s).empty());
  auto text = slurp(root / "relu__default" / "relu__default_summary.txt");
  CHECK_THAT(text, Catch::Contains("Operation: relu\n"));
  CHECK_THAT(text, Catch::Contains("Full op name: aten.relu.default\n"));
  CHECK_THAT(text, Catch::Contains("Backend: kernel_agent\n"));
  CHECK_THAT(text, Catch::Contains("KernelAgent workers: 4"));
  CHECK_THAT(text, Catch::Contains("Attempts: 1\n"));
  CHECK_THAT(text, Catch::Contains("v1: relu__default_implementation_v1.py: correct, speedup 1.20x"));
  CHECK_THAT(text, Catch::Contains("Final status: passed (version 1 stands)"));
  CHECK_THAT(text, Catch::Contains("Agent session: relu__default_session_session_20260114_152250_994449"));

  op_summary failed;
  failed.op_name = "aten.tanh.default";
  failed.folder = "tanh__default";
  failed.versions.push_back({1, "", "no_kernel: KernelAgent found no kernel", "", 1.0});
  failed.status = "failed";
  failed.final_version = 1;
  failed.why = "no correct version in 1 of 1 attempts";
  REQUIRE(f.write_overall({s, failed}).empty());
  auto overall = slurp(root / "OVERALL_SUMMARY.txt");
  CHECK_THAT(overall, Catch::Contains("Operators: 2\n"));
  CHECK_THAT(overall, Catch::Contains("Passed: 1\n"));
  CHECK_THAT(overall, Catch::Contains("Failed: 1\n"));
  CHECK_THAT(overall, Catch::Contains("Success rate: 50.0%"));
  CHECK_THAT(overall, Catch::Contains("Attempts: 2 (1 with a kernel file)"));
  CHECK_THAT(overall, Catch::Contains("aten.tanh.default: failed"));

  // The directory backend reads the run folder as a kernel folder: logs and sessions aside.
  auto scan = scan_kernel_dir(f.path());
  REQUIRE(scan.kernels.size() == 1);
  CHECK(scan.kernels[0].op_name == "aten.relu.default");
  CHECK(scan.problems.empty());
}
