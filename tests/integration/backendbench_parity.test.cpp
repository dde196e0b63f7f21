// BackendBench's command line as a BackendBench user types it: its remaining flags, its
// .parquet given as it is, --backend flag_gems, --backend llm-relay and --dsl; and, on a GPU
// machine, a CuTe DSL and a Helion kernel and FlagGems on a few operators.

#include <catch2/catch.hpp>

#include "skip.hpp"

#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include <signal.h>

#include <nlohmann/json.hpp>

#include "cluster/config.hpp"
#include "programs.hpp"

using nlohmann::json;
using bb::test::run;
namespace fs = std::filesystem;

namespace {

const std::string bbcluster = BB_BIN_DIR "/bbcluster";
const std::string hf_train = BB_TRACES_DIR "/hf_train";

bool python_imports(const std::string& module) {
  auto line = bb::build_python() + " -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(line.c_str()) == 0;
}

// A stand-in flag_gems package: FlagGems' registration table (_FULL_CONFIG) with three
// entries, one of them switched off by its condition, and torch for the arithmetic.
void write_fake_flag_gems(const bb::test::temp_dir& dir) {
  fs::create_directories(dir / "fake/flag_gems");
  bb::test::write_file(dir / "fake/flag_gems/__init__.py", R"py(import torch
__version__ = "0.0-test"
def relu(x): return torch.relu(x)
def add(a, b, alpha=1): return torch.add(a, b, alpha=alpha)
def mm(a, b): return a @ b
_FULL_CONFIG = (("relu", relu), ("add.Tensor", add), ("mm", mm, lambda: False))
)py");
}

// The chat-completions server of tests/llm, stopped when the object goes.
struct llm_server {
  std::string port;
  pid_t pid = 0;
  llm_server(const bb::test::temp_dir& dir, const json& script) {
    bb::test::write_file(dir / "script.json", script.dump());
    auto cmd = "/usr/bin/python3 " BB_SOURCE_DIR "/tests/llm/fake_llm_server.py " + dir / "script.json"
               + " " + dir / "port " + dir / "requests.jsonl >" + dir / "server.log"
               + " 2>&1 & echo $! >" + dir / "server.pid";
    REQUIRE(std::system(cmd.c_str()) == 0);
    for (int i = 0; i < 200 && port.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      port = bb::test::read_file(dir / "port");
    }
    pid = std::atoi(bb::test::read_file(dir / "server.pid").c_str());
    REQUIRE_FALSE(port.empty());
  }
  ~llm_server() {
    if (pid > 0)
      ::kill(pid, SIGKILL);
  }
};

const char* fast_llm = "[timing]\ncpu_warmup = 1\ncpu_runs = 3\n[llm]\ntimeout_s = 1.5\n"
                       "max_retries = 0\nbackoff_s = 0.1\n";

bool appears_under(const fs::path& dir, const std::string& text) {
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && bb::test::read_file(e.path().string()).find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("BackendBench's remaining flags are taken, or refused with the reason", "[integration]") {
  bb::test::temp_dir dir;
  auto help = run(dir, bbcluster + " --help");
  REQUIRE(help.status == 0);
  for (auto flag : {"--num-workers", "--daemon", "--no-daemon", "--dsl", "--check-overhead-dominated-ops",
                    "--alternative-torchbench-data-path", "--load_cpp_source", "--harness",
                    "--llm-max-attempts", "llm-relay", "flag_gems", "cutedsl", "helion"})
    CHECK(help.out.find(flag) != std::string::npos);

  auto workers = run(dir, "cd " + dir.path + " && " + bbcluster + " --disable-output-logs --num-workers 2 --no-daemon");
  INFO(workers.err);
  CHECK(workers.status == 0);
  CHECK(workers.err.find("over 2 evaluators") != std::string::npos);
  auto daemon = run(dir, "cd " + dir.path + " && " + bbcluster + " --disable-output-logs --daemon --harness cpu");
  CHECK(daemon.status == 0);
  auto disagree = run(dir, bbcluster + " --num-workers 2 --devices 3");
  CHECK(disagree.status == 2);
  CHECK(disagree.err.find("disagree") != std::string::npos);

  auto facto = run(dir, bbcluster + " --suite facto");
  CHECK(facto.status == 2);
  CHECK(facto.err.find("FACTO") != std::string::npos);
  auto overhead = run(dir, bbcluster + " --suite smoke --check-overhead-dominated-ops");
  CHECK(overhead.status == 2);
  CHECK(overhead.err.find("only supported for the torchbench suite") != std::string::npos);
  auto cpp_source = run(dir, bbcluster + " --load_cpp_source True");
  CHECK(cpp_source.status == 2);
  CHECK(cpp_source.err.find("BBCLUSTER_EXPORT_KERNEL") != std::string::npos);
  auto relay_anthropic = run(dir, bbcluster + " --backend llm-relay --llm-provider anthropic");
  CHECK(relay_anthropic.status == 2);
  CHECK(relay_anthropic.err.find("chat completions") != std::string::npos);
}

TEST_CASE("the flag --alternative-torchbench-data-path takes BackendBench's .parquet, converted once",
          "[integration]") {
  if (!python_imports("pyarrow")) {
    BB_SKIP("no pyarrow in " + bb::build_python() + ": skipped (scripts/setup.sh installs it)");
  }
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "make.py", R"py(import math, sys
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({
  "op_name": ["aten.relu.default", "aten.relu.default", "aten.tanh.default", "aten.empty_like.default"],
  "args": ["((T([2, 3], f32),), {})", "((T([8], f32),), {})", "((T([4], f32),), {})", "((T([2], f32),), {})"],
  "included_in_benchmark": [True, True, True, False],
  "why_excluded": [[], [], [], ["BackendBench does not support correctness testing for tensor creation and manipulation ops yet"]],
  "runtime_ms": [0.5, math.nan, 1.0, math.nan],
  "is_overhead_dominated_op": [False, True, False, False],
}), sys.argv[1])
)py");
  REQUIRE(std::system((bb::build_python() + " " + dir / "make.py " + dir / "p.parquet").c_str()) == 0);
  auto env = "BBCLUSTER_HOME=" + dir / "home" + " ";
  auto list = run(dir, env + bbcluster + " --suite torchbench --alternative-torchbench-data-path "
                           + dir / "p.parquet --list");
  INFO(list.err);
  REQUIRE(list.status == 0);
  CHECK(list.err.find("converted now") != std::string::npos);
  CHECK(list.out.find("aten.relu.default") != std::string::npos);
  CHECK(list.out.find("aten.tanh.default") != std::string::npos);
  CHECK(list.out.find("1 rows left out: not included_in_benchmark") != std::string::npos);
  CHECK(list.out.find("tensor creation and manipulation ops") != std::string::npos);
  CHECK(list.out.find("aten.empty_like.default (1 rows)") != std::string::npos);

  auto overhead = run(dir, "cd " + dir.path + " && " + env + bbcluster + " --suite torchbench --data "
                               + dir / "p.parquet --check-overhead-dominated-ops --log-dir run");
  INFO(overhead.err);
  REQUIRE(overhead.status == 0);
  CHECK(overhead.err.find("(cached)") != std::string::npos);
  CHECK(overhead.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  auto finished = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["op_name"] == "aten.relu.default");
  CHECK(finished[0]["correctness"].size() == 1);
}

TEST_CASE("the flag --backend flag_gems writes a kernel per operator FlagGems registers and lists the rest",
          "[integration]") {
  bb::test::temp_dir dir;
  write_fake_flag_gems(dir);
  auto env = "BBCLUSTER_HOME=" + dir / "home" + " PYTHONPATH=" + dir / "fake" + " ";
  auto ops = " --suite torchbench --data " + hf_train + " --ops relu.default,add.Tensor,mm.default,tanh.default --topn 1";
  auto list = run(dir, env + bbcluster + ops + " --backend flag_gems --list");
  INFO(list.err);
  REQUIRE(list.status == 0);
  CHECK(list.out.find("aten.relu.default") != std::string::npos);
  CHECK(list.out.find("aten.add.Tensor") != std::string::npos);
  CHECK(list.out.find("aten.mm.default") == std::string::npos);
  CHECK(list.err.find("FlagGems 0.0-test implements 2 of the 4 selected operators") != std::string::npos);
  CHECK(list.err.find("skipped, FlagGems lacks them: aten.mm.default, aten.tanh.default") != std::string::npos);

  // The kernels it wrote call FlagGems' registered functions: evaluated as a directory here
  // on the CPU, with the stand-in package.
  std::string kernels;
  for (auto& e : fs::directory_iterator(dir / "home/flag_gems"))
    kernels = e.path().string();
  REQUIRE(fs::exists(kernels + "/add__Tensor/add__Tensor_implementation_v1.py"));
  CHECK_FALSE(fs::exists(kernels + "/mm__default"));
  auto eval = run(dir, "cd " + dir.path + " && " + env + bbcluster + ops + " --backend directory --ops-directory "
                           + kernels + " --log-dir run");
  INFO(eval.err);
  CHECK(eval.status == 0);
  CHECK(eval.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);

  if (bb::count_gpus() == 0) {
    auto refused = run(dir, env + bbcluster + ops + " --backend flag_gems");
    CHECK(refused.status == 2);
    CHECK(refused.err.find("need a CUDA device") != std::string::npos);
  }
  auto missing = run(dir, "BBCLUSTER_HOME=" + dir / "home2 " + bbcluster + ops + " --backend flag_gems --list");
  if (!python_imports("flag_gems")) {
    CHECK(missing.status == 2);
    CHECK(missing.err.find("pip install flag-gems") != std::string::npos);
  }
}

TEST_CASE("the flag --backend llm-relay asks the relay on 127.0.0.1:11434 unless told, and --dsl helion asks "
          "for Helion",
          "[integration]") {
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "fast.toml", fast_llm);
  llm_server server(dir, json{{"aten.relu.default", {{{"content", "```python\nimport torch\n\ndef "
                                                                  "relu__default_kernel_impl(x):\n    return "
                                                                  "torch.clamp(x, min=0)\n```\n"}}}}});
  auto ops = " --suite torchbench --data " + hf_train + " --ops relu.default --topn 1 --config " + dir / "fast.toml";
  auto r = run(dir, bbcluster + ops + " --backend llm-relay --llm-model scripted --dsl helion --llm-base-url "
                      "http://127.0.0.1:" + server.port + "/v1 --log-dir " + dir / "run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto requests = bb::test::journal_lines(dir / "requests.jsonl");
  REQUIRE(requests.size() == 1);
  CHECK(requests[0]["api"] == "openai");
  auto prompt = requests[0]["prompt"].get<std::string>();
  CHECK(prompt.find("Helion kernel") != std::string::npos);
  CHECK(prompt.find("relu__default_helion_kernel") != std::string::npos);
  CHECK(prompt.find("@helion.kernel()") != std::string::npos);
  CHECK(r.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);

  // No --llm-base-url: BackendBench's relay address (nothing listens there in this test).
  auto fallback = run(dir, bbcluster + ops + " --backend llm-relay --llm-model scripted --log-dir " + dir / "run2");
  INFO(fallback.err);
  CHECK(appears_under(dir / "run2", "http://127.0.0.1:11434/v1"));
}

TEST_CASE("a CuTe DSL relu and a Helion relu, evaluated on the GPU", "[gpu]") {
  if (bb::count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  for (auto [folder, module] : {std::pair{"gpu_cutedsl", "cutlass.cute"}, std::pair{"gpu_helion", "helion"}}) {
    if (!python_imports(module)) {
      WARN(std::string(module) + " is not importable by " + bb::build_python() + ": " + folder + " skipped");
      continue;
    }
    bb::test::temp_dir dir;
    bb::test::write_file(dir / "relu.txt", "Operator: aten.relu.default\n"
                                           "cnt: 1, ((T([4096, 4096], f16),), {})\n"
                                           "cnt: 1, ((T([64, 128, 512], f32),), {})\n");
    auto r = run(dir, "cd " + dir.path + " && " + bbcluster + " --suite torchbench --data " + dir / "relu.txt"
                        + " --backend directory --ops-directory " BB_SOURCE_DIR "/tests/kernels/" + folder
                        + " --devices 1 --log-dir run");
    INFO(folder << "\n" << r.err);
    REQUIRE(r.status == 0);
    auto finished = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
    REQUIRE(finished.size() == 1);
    INFO(finished[0].dump().substr(0, 3000));
    CHECK(finished[0]["outcome"] == "ok");
    REQUIRE(finished[0]["correctness"].size() == 2);
    for (auto& c : finished[0]["correctness"])
      CHECK(c["is_correct"] == true);
  }
}

TEST_CASE("FlagGems on relu, add, mm and softmax, evaluated on the GPU", "[gpu]") {
  if (bb::count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  if (!python_imports("flag_gems")) {
    BB_SKIP("flag_gems is not importable by " + bb::build_python() + ": skipped (pip install flag-gems)");
  }
  bb::test::temp_dir dir;
  auto r = run(dir, "cd " + dir.path + " && BBCLUSTER_HOME=" + dir / "home " + bbcluster
                      + " --suite torchbench --data " + hf_train
                      + " --ops relu.default,add.Tensor,mm.default,_softmax.default --topn 3 --backend flag_gems"
                        " --devices 1 --log-dir run");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("implements 4 of the 4 selected operators") != std::string::npos);
  auto finished = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
  CHECK(finished.size() == 4);
  for (auto& f : finished) {
    INFO(f.dump().substr(0, 3000));
    CHECK(f["outcome"] == "ok");
    for (auto& c : f["correctness"]) {
      // FlagGems' mm (5.0.2) refuses an operand whose strides are not 16-byte aligned, hf_train's
      // transposed [50265, 8192] f16 (stride 50265): that input fails as the kernel's own error,
      // every other input of the four operators passes.
      auto args = c["args"].get<std::string>();
      if (f["op_name"] == "aten.mm.default" && args.find("[1, 50265]") != std::string::npos) {
        CHECK(c["is_correct"] == false);
        CHECK(c["error_msg"].get<std::string>().find("16-byte aligned") != std::string::npos);
      } else {
        CHECK(c["is_correct"] == true);
      }
    }
  }
}

namespace {

// BackendBench's opinfo rule written out on its own (suite/opinfo.py): the OpInfos named, the
// dtype supported, the samples listed after seeding, those whose call traces to one aten
// operator that reproduces the result; counted per aten operator.
const char* reference_counts = R"py(import random, sys
from collections import defaultdict
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode
class Trace(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []
    def __torch_dispatch__(self, fn, types, args=(), kwargs=None):
        self.ops.append(fn)
        return fn(*args, **(kwargs or {}))
names = set(sys.argv[1:])
counts = defaultdict(int)
for op in op_db:
    if op.name not in names or torch.float32 not in op.supported_dtypes("cpu"):
        continue
    torch.manual_seed(0)
    random.seed(0)
    try:
        samples = list(op.sample_inputs("cpu", torch.float32))
    except Exception:
        continue
    for s in samples:
        try:
            with Trace() as t:
                ref = op.op(s.input, *s.args, **s.kwargs)
            if len(t.ops) == 1:
                res = t.ops[0](s.input, *s.args, **s.kwargs)
                torch.testing.assert_close(ref, res, equal_nan=True, atol=1e-2, rtol=1e-2)
                counts[str(t.ops[0])] += 1
        except Exception:
            pass
for name, n in sorted(counts.items()):
    print(name, n)
)py";

std::map<std::string, size_t> listed_counts(const std::string& out) {
  std::map<std::string, size_t> counts;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string op;
    size_t n = 0;
    if (line.rfind("aten.", 0) == 0 && words >> op >> n)
      counts[op] = n;
  }
  return counts;
}

} // namespace

TEST_CASE("opinfo: BackendBench's sample counts, aten against itself 1.00, the same samples "
          "in two processes",
          "[integration]") {
  if (!python_imports("torch.testing._internal.common_methods_invocations")) {
    BB_SKIP("this torch's OpInfo database does not import (pip install expecttest): skipped");
  }
  if (bb::count_gpus() > 0) {
    BB_SKIP("a GPU machine selects bfloat16 CUDA samples: the CPU counts are not checked here");
  }
  bb::test::temp_dir dir;
  bb::test::write_file(dir / "reference.py", reference_counts);
  auto reference = run(dir, bb::build_python() + " " + dir / "reference.py"
                              + " nn.functional.relu add mm softmax index_select");
  REQUIRE(reference.status == 0);
  std::map<std::string, size_t> expected;
  {
    std::istringstream in(reference.out);
    std::string op;
    size_t n = 0;
    while (in >> op >> n)
      expected[op] = n;
  }
  // softmax's samples call aten._softmax without half_to_float: BackendBench keeps none.
  CHECK(expected.count("aten._softmax.default") == 0);
  CHECK(expected["aten.add.Tensor"] > 0);
  CHECK(expected["aten.index_select.default"] > 0);

  auto env = "BBCLUSTER_HOME=" + dir / "home" + " ";
  auto list = run(dir, env + bbcluster + " --suite opinfo --ops nn.functional.relu,add,mm,softmax,index_select --list");
  INFO(list.err);
  REQUIRE(list.status == 0);
  CHECK(listed_counts(list.out) == expected);
  CHECK(list.err.find("float32 samples on cpu") != std::string::npos);
  CHECK(list.err.find("kept in") != std::string::npos);
  // The second run on this machine reads the first one's selection: the same suite.
  auto again = run(dir, env + bbcluster + " --suite opinfo --ops nn.functional.relu,add,mm,softmax,index_select --list");
  INFO(again.err);
  REQUIRE(again.status == 0);
  CHECK(again.err.find("made on this kind of machine before") != std::string::npos);
  CHECK(again.out == list.out);
  // Operators whose result is uninitialised memory or random are left out, with the reason:
  // whether they "reproduce" is chance, and the suite would change from run to run.
  auto random = run(dir, env + bbcluster + " --suite opinfo --ops empty_like,new_empty,bernoulli,relu --list");
  REQUIRE(random.status == 0);
  CHECK(listed_counts(random.out).size() == 1);
  CHECK(random.out.find("3 operators left out") != std::string::npos);
  CHECK(random.out.find("aten.empty_like.default has an uninitialised or random result") != std::string::npos);
  CHECK(random.out.find("aten.new_empty.default has an uninitialised or random result") != std::string::npos);
  CHECK(random.out.find("aten.bernoulli.default has an uninitialised or random result") != std::string::npos);
  // With none left, the error says why each was left out.
  auto none = run(dir, env + bbcluster + " --suite opinfo --ops empty_like --list");
  CHECK(none.status != 0);
  CHECK(none.err.find("empty_like: none of its") != std::string::npos);

  auto sweep = run(dir, "cd " + dir.path + " && " + env + bbcluster
                          + " --suite opinfo --ops relu,add,mm,index_select --devices 2 --log-dir run");
  INFO(sweep.err);
  REQUIRE(sweep.status == 0);
  CHECK(sweep.out.find("correctness score (mean pass rate over all operators): 1.00") == 0);
  auto finished = bb::test::journal_lines(dir / "run/results.jsonl", "job_finished");
  CHECK(finished.size() == expected.size());
  for (auto& f : finished) {
    INFO(f.dump().substr(0, 2000));
    CHECK(f["outcome"] == "ok");
    CHECK(f["correctness"].size() == expected[f["op_name"].get<std::string>()]);
    for (auto& c : f["correctness"])
      CHECK(c["is_correct"] == true);
  }

  // The same text builds the same sample in another process; another index, another one.
  auto hash = [&](const std::string& text) {
    auto r = run(dir, bb::build_python() + " " BB_SOURCE_DIR "/python/bbcluster_opinfo.py hash '" + text + "' cpu");
    REQUIRE(r.status == 0);
    return r.out;
  };
  auto first = hash("opinfo(add, , float32, 3, seed=0)");
  CHECK(first.size() == 65);
  CHECK(hash("opinfo(add, , float32, 3, seed=0)") == first);
  CHECK(hash("opinfo(add, , float32, 4, seed=0)") != first);
  // A torch without the OpInfo says so.
  auto missing = run(dir, bb::build_python() + " " BB_SOURCE_DIR "/python/bbcluster_opinfo.py hash "
                            "'opinfo(no_such_op, , float32, 0, seed=0)' cpu");
  CHECK(missing.status != 0);
  CHECK(missing.err.find("has no OpInfo 'no_such_op'") != std::string::npos);
}
