#include <catch2/catch.hpp>

#include "skip.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/evaluator.hpp"
#include "artefacts/compiler.hpp"
#include "cluster/config.hpp"
#include "artefacts/kernel_dir.hpp"
#include "messages/errors.hpp"
#include "support.hpp"

using namespace bb;

namespace {

// A relu job whose kernel is one of tests/kernels/gpu_faults (or the correct .cu relu).
eval_job gpu_job(uint64_t id, const std::string& file, const compile_settings& s) {
  eval_job job;
  job.job_id = id;
  job.attempt = 1;
  job.op_name = "aten.relu.default";
  auto err = read_kernel_file(BB_SOURCE_DIR "/tests/kernels/" + file, "relu__default", job.kernel);
  REQUIRE(err.empty());
  auto built = build_kernel(job.kernel, s);
  INFO(built.message);
  REQUIRE(built.status == outcome::ok);
  job.kernel.object_path = built.object_path;
  job.correctness_inputs = {"((T([1024, 512], f32),), {})"};
  job.performance_inputs = {"((T([1024, 512], f32),), {})"};
  return job;
}

eval_result evaluate(caf::scoped_actor& self, const evaluator_actor& e, const eval_job& job) {
  eval_result out;
  self->request(e, std::chrono::seconds(300), atom::evaluate_v, job)
    .receive([&](eval_result& r) { out = std::move(r); },
             [&](caf::error& err) { FAIL("evaluator failed: " << describe(err)); });
  return out;
}

} // namespace

TEST_CASE("GPU faults end their job, and the same evaluator then evaluates a correct kernel",
          "[gpu]") {
  if (count_gpus() == 0) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  caf::actor_system_config cfg;
  cfg.add_message_types<caf::id_block::bb>();
  caf::actor_system sys{cfg};
  test::temp_dir dir;
  compile_settings s;
  s.tools = default_toolchain();
  s.cache_dir = BB_TEST_CACHE;
  s.log_dir = dir / "compile";
  s.has_cuda = true;
  evaluator_config ecfg;
  ecfg.runner = BB_BIN_DIR "/bbrunner";
  ecfg.device = "cuda";
  ecfg.gpu = "0";
  ecfg.log_dir = dir / "logs";
  ecfg.call_timeout_s = 10;
  auto e = sys.spawn<caf::detached>(evaluator, ecfg);
  caf::scoped_actor self{sys};

  auto illegal = evaluate(self, e, gpu_job(1, "gpu_faults/illegal_access.cu", s));
  INFO(illegal.detail);
  CHECK(illegal.outcome == bb::outcome::cuda_error);
  REQUIRE_FALSE(illegal.correctness.empty());
  CHECK(illegal.correctness[0].error_type == "cuda_error");

  auto hang = evaluate(self, e, gpu_job(2, "gpu_faults/endless_loop.cu", s));
  CHECK(hang.outcome == bb::outcome::timed_out);
  CHECK(hang.detail.find("call timeout") != std::string::npos);

  auto side = evaluate(self, e, gpu_job(3, "gpu_faults/side_stream.cu", s));
  CHECK(side.flags == std::vector<std::string>{"uses_cuda_stream"});
  REQUIRE_FALSE(side.correctness.empty());
  CHECK(side.correctness[0].error_msg == "Skipped: uses CUDA stream");

  auto good = evaluate(self, e, gpu_job(4, "gpu/relu__default/relu__default_implementation_v1.cu", s));
  INFO(good.detail);
  CHECK(good.outcome == bb::outcome::ok);
  REQUIRE(good.correctness.size() == 1);
  CHECK(good.correctness[0].is_correct);
  REQUIRE(good.performance.size() == 1);
  CHECK(good.performance[0].successfully_ran);
  CHECK(good.where.device.rfind("cuda: ", 0) == 0);
  // A fresh runner after the lost context and one after the timeout, each checked first.
  CHECK(hang.runner_restarts + side.runner_restarts + good.runner_restarts >= 2);
  self->send_exit(e, caf::exit_reason::user_shutdown);
}
