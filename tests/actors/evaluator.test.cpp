#include <catch2/catch.hpp>

#include <cstdlib>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/evaluator.hpp"
#include "artefacts/jit_cache.hpp"
#include "artefacts/sha256.hpp"
#include "cluster/config.hpp"
#include "messages/errors.hpp"
#include "suite/suite.hpp"
#include "skip.hpp"
#include "support.hpp"

using namespace bb;

namespace {

eval_job smoke_job(uint64_t id) {
  auto op = smoke_suite().ops.front();
  eval_job job;
  job.job_id = id;
  job.attempt = 1;
  job.op_name = op.op_name;
  job.kernel = {bb::kernel_kind::aten, "", "", "aten", "", "", ""};
  job.correctness_inputs = op.correctness;
  job.performance_inputs = {"((T([16], f32),), {})"};
  return job;
}

eval_result evaluate(caf::scoped_actor& self, const evaluator_actor& e, const eval_job& job) {
  eval_result out;
  self->request(e, std::chrono::seconds(60), atom::evaluate_v, job)
    .receive([&](eval_result& r) { out = std::move(r); },
             [&](caf::error& err) { FAIL("evaluator failed: " << caf::to_string(err)); });
  return out;
}

} // namespace

TEST_CASE("the evaluator runs jobs in its runner and survives the runner's death", "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.log_dir = dir.path;
  ecfg.options.cpu_warmup = 1;
  ecfg.options.cpu_runs = 2;
  // The runner inherits this and kills itself on jobs for this operator.
  ::setenv("BBCLUSTER_TEST_KILL_RUNNER_ON", "aten.crash_me.default", 1);
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};

  auto ok = evaluate(self, e, smoke_job(1));
  CHECK(ok.outcome == bb::outcome::ok);
  REQUIRE(ok.correctness.size() == 1);
  CHECK(ok.correctness[0].is_correct);
  CHECK(ok.where.device == "cpu");

  auto crash_job = smoke_job(2);
  crash_job.op_name = "aten.crash_me.default";
  auto crashed = evaluate(self, e, crash_job);
  CHECK(crashed.outcome == bb::outcome::crashed);
  CHECK(crashed.detail.rfind("runner killed by signal 9 (SIGKILL) during ", 0) == 0);
  REQUIRE(crashed.correctness.size() == 1);
  CHECK(crashed.correctness[0].error_type == "crashed");

  // A fresh runner takes the next job.
  auto after = evaluate(self, e, smoke_job(3));
  CHECK(after.outcome == bb::outcome::ok);
  self->send_exit(e, caf::exit_reason::user_shutdown);
  ::unsetenv("BBCLUSTER_TEST_KILL_RUNNER_ON");
}

TEST_CASE("a slot whose runner cannot start is taken out of service with the reason",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  auto fake = dir / "fake_runner.sh";
  test::write_file(fake, "#!/bin/sh\necho 'no torch here' >&2\nexit 7\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  evaluator_config ecfg;
  ecfg.runner = fake;
  ecfg.log_dir = dir / "logs";
  ecfg.check_attempts = 2;
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};
  self->monitor(e);
  std::string why;
  self->request(e, std::chrono::seconds(60), atom::evaluate_v, smoke_job(1))
    .receive([&](eval_result&) { FAIL("a slot without a runner answered with a result"); },
             [&](caf::error& err) { why = describe(err); });
  CHECK(why.find("out of service") != std::string::npos);
  CHECK(why.find("exited with status 7") != std::string::npos);
  // The evaluator is gone, so its coordinator gives its jobs to other slots.
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; });
  CHECK(down);
  // It tried check_attempts fresh runners.
  auto log = test::read_file(dir / "logs/runner_local_slot0.log");
  CHECK(log.find("no torch here") != log.rfind("no torch here"));
}

TEST_CASE("a job that outlives its timeout is timed_out and the runner group is killed",
          "[actors]") {
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.log_dir = dir.path;
  ecfg.job_timeout_s = 0.5;
  // Enough timed calls on a large tensor to run for many seconds.
  ecfg.options.cpu_warmup = 0;
  ecfg.options.cpu_runs = 1000000;
  ecfg.options.cpu_max_seconds = 0.0;
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};
  auto job = smoke_job(1);
  job.performance_inputs = {"((T([1024, 1024], f32),), {})"};
  auto r = evaluate(self, e, job);
  CHECK(r.outcome == bb::outcome::timed_out);
  CHECK(r.detail.find("killed by signal 15 (SIGTERM)") != std::string::npos);
  self->send_exit(e, caf::exit_reason::user_shutdown);
}

namespace {

// A relu kernel whose module runs `top` when it loads and whose function runs `body` (Python,
// `d`: Triton's cache folder at load and in each call, `x` the call's input).
artefact python_relu(const std::string& folder, const std::string& top, const std::string& body) {
  auto source = "import os\nimport torch\n\nd = os.environ['TRITON_CACHE_DIR']\nos.makedirs(d, exist_ok=True)\n"
                + top + "\n\ndef relu_kernel_impl(x):\n" + body + "    return torch.relu(x)\n";
  auto path = folder + "/relu_" + sha256_hex(source).substr(0, 8) + ".py";
  test::write_file(path, source);
  return {kernel_kind::py, path, source, sha256_hex(source), "relu_kernel_impl", "", ""};
}

// An evaluator of Python kernels with the JIT cache's store in `dir`/store, its runner in
// sandbox `mode` (the folder made reachable by the unprivileged user a runner started by root
// becomes).
evaluator_config jit_cache_config(const std::string& dir, sandbox_mode mode) {
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read
                                      | std::filesystem::perms::group_exec | std::filesystem::perms::others_read
                                      | std::filesystem::perms::others_exec);
  std::filesystem::create_directories(dir + "/store");
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.log_dir = dir + "/logs";
  ecfg.options.cpu_warmup = 1;
  ecfg.options.cpu_runs = 2;
  ecfg.jit_cache_dir = dir + "/store";
  ecfg.sandbox.mode = mode;
  ecfg.sandbox.hidden = default_hidden_folders();
  ecfg.sandbox.read_only = python_environment_folders(build_python());
  ecfg.sandbox.read_only.push_back(BB_BIN_DIR);
  ecfg.sandbox.read_only.push_back(ecfg.jit_cache_dir);
  return ecfg;
}

eval_job relu_job(uint64_t id, artefact kernel) {
  eval_job job;
  job.job_id = id;
  job.attempt = 1;
  job.op_name = "aten.relu.default";
  job.kernel = std::move(kernel);
  job.correctness_inputs = {"((T([16], f32),), {})"};
  job.performance_inputs = job.correctness_inputs;
  return job;
}

} // namespace

TEST_CASE("what a sandboxed Python kernel's JIT libraries compile is kept for that kernel "
          "alone, across runners",
          "[actors]") {
  std::vector<sandbox_mode> modes = {sandbox_mode::off};
  if (sandbox_unavailable().empty())
    modes.push_back(sandbox_mode::required);
  else
    BB_SKIP("no sandbox on this machine, test skipped: " << sandbox_unavailable());
  for (auto mode : modes) {
    INFO("sandbox " << to_string(mode));
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::bb>();
    caf::actor_system sys{cfg};
    auto dir = test::unhidden_temp_dir("jit");
    auto ecfg = jit_cache_config(dir, mode);
    auto a = python_relu(dir,
                         "if os.path.exists(os.path.join(d, 'a.cubin')):\n"
                         "    open(os.path.join(d, 'seen.txt'), 'w').write('seen')\n"
                         "open(os.path.join(d, 'a.cubin'), 'w').write('compiled')\n"
                         "open(os.path.join(d, 'autotuning.txt'), 'w').write(os.environ.get('TRITON_CACHE_AUTOTUNING', ''))\n"
                         "i = os.environ['TORCHINDUCTOR_CACHE_DIR']\n"
                         "os.makedirs(i, exist_ok=True)\n"
                         "open(os.path.join(i, 'x'), 'w').write('inductor')\n",
                         "");
    auto a_entry = jit_entry_name(a.hash);
    // B lists the runner's JIT folders and plants a file where A's compile.
    auto b = python_relu(dir,
                         "root = os.path.dirname(os.path.dirname(d))\n"
                         "open(os.path.join(d, 'listing.txt'), 'w').write(','.join(sorted(os.listdir(root))))\n",
                         "    victim = os.path.join(root, '" + a_entry + "', 'triton')\n"
                         "    os.makedirs(victim, exist_ok=True)\n"
                         "    open(os.path.join(victim, 'planted.cubin'), 'w').write('planted')\n");
    auto b_entry = jit_entry_name(b.hash);
    caf::scoped_actor self{sys};
    auto e = sys.spawn<caf::detached>(evaluator, ecfg);
    auto first = evaluate(self, e, relu_job(1, a));
    REQUIRE(first.outcome == outcome::ok);
    REQUIRE(first.correctness.size() == 1);
    CHECK(first.correctness[0].is_correct);
    auto store = jit_store_for(ecfg.jit_cache_dir, first.where);
    if (mode == sandbox_mode::off) {
      // A bare runner's kernel could write to the store itself: nothing is kept from it.
      CHECK(!std::filesystem::exists(store + "/" + a_entry));
      self->send_exit(e, caf::exit_reason::user_shutdown);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      continue;
    }
    CHECK(test::read_file(store + "/" + a_entry + "/triton/a.cubin") == "compiled");
    CHECK(test::read_file(store + "/" + a_entry + "/inductor/x") == "inductor");
    // Triton's autotuner keeps its measurements in that folder too.
    CHECK(test::read_file(store + "/" + a_entry + "/triton/autotuning.txt") == "1");
    CHECK(!std::filesystem::exists(store + "/" + a_entry + "/triton/seen.txt"));

    auto second = evaluate(self, e, relu_job(2, b));
    CHECK(second.outcome == outcome::ok);
    // B saw only its own folder, and what it planted in A's was not kept for A.
    CHECK(test::read_file(store + "/" + b_entry + "/triton/listing.txt") == b_entry);
    CHECK(!std::filesystem::exists(store + "/" + a_entry + "/triton/planted.cubin"));
    self->send_exit(e, caf::exit_reason::user_shutdown);

    // A fresh evaluator's fresh runner finds what A compiled before.
    auto again = sys.spawn<caf::detached>(evaluator, ecfg);
    auto third = evaluate(self, again, relu_job(3, a));
    CHECK(third.outcome == outcome::ok);
    CHECK(test::read_file(store + "/" + a_entry + "/triton/seen.txt") == "seen");
    CHECK(!std::filesystem::exists(store + "/" + a_entry + "/triton/planted.cubin"));
    self->send_exit(again, caf::exit_reason::user_shutdown);

    // Past evaluator.jit_cache_max_mb (here a byte), what a new kernel compiled makes the
    // entries used least recently go; its own stays.
    auto small = ecfg;
    small.jit_cache_max_bytes = 1;
    auto c = python_relu(dir, "open(os.path.join(d, 'c.cubin'), 'w').write('c')\n", "");
    auto c_entry = jit_entry_name(c.hash);
    auto trimmer = sys.spawn<caf::detached>(evaluator, small);
    CHECK(evaluate(self, trimmer, relu_job(4, c)).outcome == outcome::ok);
    CHECK(test::read_file(store + "/" + c_entry + "/triton/c.cubin") == "c");
    CHECK(!std::filesystem::exists(store + "/" + a_entry));
    CHECK(!std::filesystem::exists(store + "/" + b_entry));
    self->send_exit(trimmer, caf::exit_reason::user_shutdown);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

TEST_CASE("Python jobs one after another keep their runner where the loader binds libtorch's "
          "std::filesystem",
          "[actors]") {
  // As on the H100 machine: bbrunner's std::filesystem calls bound to the copy libtorch.so
  // exports, whose remove_all of a folder with contents jumps to address 0. Each Python job
  // after a runner's first empties the first one's JIT folder; it crashed there and ran again
  // on a fresh runner.
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto dir = test::unhidden_temp_dir("libtorch-fs");
  std::filesystem::create_directories(dir + "/store");
  auto wrapper = dir + "/bbrunner-libtorch-first";
  test::write_file(wrapper, "#!/bin/sh\nLD_PRELOAD=\"" BB_TORCH_LIBRARY_DIR "/libtorch.so${LD_PRELOAD:+ $LD_PRELOAD}\" exec \""
                            BB_BIN_DIR "/bbrunner\" \"$@\"\n");
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  evaluator_config ecfg;
  ecfg.runner = wrapper;
  ecfg.log_dir = dir + "/logs";
  ecfg.options.cpu_warmup = 1;
  ecfg.options.cpu_runs = 2;
  ecfg.jit_cache_dir = dir + "/store";
  ecfg.sandbox.mode = sandbox_mode::off;
  // Each kernel leaves files in its JIT folder, for the next job to empty.
  auto a = python_relu(dir, "open(os.path.join(d, 'a.cubin'), 'w').write('a')\n", "");
  auto b = python_relu(dir, "open(os.path.join(d, 'b.cubin'), 'w').write('b')\n", "");
  caf::scoped_actor self{sys};
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  auto first = evaluate(self, e, relu_job(1, a));
  auto second = evaluate(self, e, relu_job(2, b));
  auto third = evaluate(self, e, relu_job(3, a));
  self->send_exit(e, caf::exit_reason::user_shutdown);
  auto log = test::read_file(dir + "/logs/runner_local_slot0.log");
  INFO(log);
  // The wrapper did put libtorch first (else this test proves nothing).
  REQUIRE(log.find("std::filesystem comes from " BB_TORCH_LIBRARY_DIR "/libtorch.so") != std::string::npos);
  for (auto* r : {&first, &second, &third}) {
    CHECK(r->outcome == outcome::ok);
    CHECK(r->runner_restarts == 0);
  }
  CHECK(log.find("fatal signal") == std::string::npos);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("FlagGems' tuning kept after one sandboxed runner's job seeds the next runner's", "[actors]") {
  if (!sandbox_unavailable().empty())
    BB_SKIP("no sandbox on this machine, test skipped: " << sandbox_unavailable());
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  auto dir = test::unhidden_temp_dir("tuning");
  auto ecfg = jit_cache_config(dir, sandbox_mode::required);
  // As FlagGems' autotuner: a database in $FLAGGEMS_CACHE_DIR/config_cache, opened on import,
  // a row added for what it measured. The second kernel reports what it found there on import.
  auto tuning = "import sqlite3\n"
                "t = os.path.join(os.environ['FLAGGEMS_CACHE_DIR'], 'config_cache')\n"
                "os.makedirs(t, exist_ok=True)\n"
                "c = sqlite3.connect(os.path.join(t, 'TunedConfig_test.db'))\n"
                "c.execute('CREATE TABLE IF NOT EXISTS \"mm_kernel-0123456789abcdef0123456789abcdef\" (key_0 INTEGER PRIMARY KEY, \"BLOCK\" INTEGER)')\n";
  auto tuner = python_relu(dir, std::string(tuning) + "c.execute('INSERT OR REPLACE INTO \"mm_kernel-0123456789abcdef0123456789abcdef\" VALUES (64, 128)')\n"
                                                      "c.commit()\nc.close()\n",
                           "");
  auto reader = python_relu(dir, std::string(tuning) + "found = c.execute('SELECT * FROM \"mm_kernel-0123456789abcdef0123456789abcdef\"').fetchall()\n"
                                                       "open(os.path.join(d, 'found.txt'), 'w').write(repr(found))\n",
                            "");
  caf::scoped_actor self{sys};
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  auto first = evaluate(self, e, relu_job(1, tuner));
  REQUIRE(first.outcome == outcome::ok);
  self->send_exit(e, caf::exit_reason::user_shutdown);
  auto store = jit_store_for(ecfg.jit_cache_dir, first.where);
  CHECK(std::filesystem::file_size(store + "/flaggems/local_slot0/TunedConfig_test.db") > 0);

  // A fresh evaluator's fresh runner: the reader finds the row before it imports anything.
  auto again = sys.spawn<caf::detached>(evaluator, ecfg);
  auto second = evaluate(self, again, relu_job(2, reader));
  CHECK(second.outcome == outcome::ok);
  self->send_exit(again, caf::exit_reason::user_shutdown);
  CHECK(test::read_file(store + "/" + jit_entry_name(reader.hash) + "/triton/found.txt") == "[(64, 128)]");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
