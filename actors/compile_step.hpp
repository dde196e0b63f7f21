#pragma once

// The one step between a kernel and its evaluation: a native artefact (.cpp, .cu) is built
// by the compile pool of the node that will evaluate it. The coordinator takes it for an
// in-process node (building ahead of evaluation, while evaluators work on earlier jobs) and
// the node server for the jobs a remote coordinator sends; both call this function.

#include <functional>
#include <string>
#include <utility>

#include <caf/error.hpp>

#include "messages/errors.hpp"
#include "messages/types.hpp"
#include "results/results.hpp"

namespace bb {

/// The terminal result of a job whose native kernel did not build (`out` not ok).
inline eval_result failed_build(const eval_job& job, const compile_outcome& out) {
  auto why = out.status == outcome::needs_cuda ? outcome::needs_cuda : outcome::compile_failed;
  auto detail = out.message + (out.log_path.empty() ? "" : "\n(full log: " + out.log_path + ")");
  return failed_result(job, why, detail);
}

/// Makes `job` ready to evaluate: a native kernel is built by `compiler` (a pool with no
/// workers to spare is waited for: the pool bounds each build itself), everything else is
/// ready at once. Calls `ready` with the job (its kernel's object_path set) or `failed` with
/// the job's terminal result (compile_failed or needs_cuda, with the compiler's errors and
/// the path of its full log).
template <class Self>
void prepare_job(Self* self, const compile_pool_actor& compiler, eval_job job,
                 std::function<void(eval_job)> ready, std::function<void(eval_result)> failed) {
  if (!is_native(job.kernel.kind) || !compiler) {
    ready(std::move(job));
    return;
  }
  self->request(compiler, caf::infinite, atom::compile_v, job.kernel)
    .then(
      [=](compile_outcome& out) mutable {
        if (out.status != outcome::ok) {
          failed(failed_build(job, out));
          return;
        }
        job.kernel.object_path = out.object_path;
        ready(std::move(job));
      },
      [=](caf::error& err) {
        failed(failed_result(job, outcome::compile_failed, "compile pool failed: " + describe(err)));
      });
}

} // namespace bb
