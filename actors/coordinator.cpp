#include "actors/coordinator.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "actors/compile_step.hpp"
#include "results/profile.hpp"
#include "results/results.hpp"
#include "messages/errors.hpp"

namespace bb {

caf::error validate(const coordinator_config& cfg) {
  if (cfg.max_attempts < 1)
    return make_error(errc::bad_config, "coordinator: max_attempts must be >= 1");
  return {};
}

namespace {

void dispatch(coordinator_pointer self);
void settle(coordinator_pointer self, eval_result result);

// Tells the reporter, counting the message in the sweep's pace.
template <class... Ts>
void report(coordinator_pointer self, Ts&&... xs) {
  self->send(self->state.reporter, std::forward<Ts>(xs)...);
  ++self->state.messages;
}

// Whether an evaluation is running or its verdict is on its way to the reporter.
bool anything_running(const coordinator_state& st) {
  auto ids = st.table.unfinished();
  return !st.busy.empty() || std::any_of(ids.begin(), ids.end(), [&](uint64_t id) {
           return st.table.state_of(id) == job_table::state::reviewing;
         });
}

// Asks the reporter for the reports (partial when jobs remain) and answers `run` with them and
// the sweep's pace.
void finish(coordinator_pointer self) {
  auto& st = self->state;
  st.finished = true;
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started_at).count();
  auto cpu = process_cpu_seconds() - st.cpu_at_start;
  spdlog::info("coordinator: {} of {} operators terminal after {:.2f} s: {} jobs dispatched, {} "
               "messages handled, {:.2f} s of CPU in this process", st.table.done(), st.table.size(),
               seconds, st.dispatched, st.messages, cpu);
  auto deliver = [=](sweep_report& report) {
    auto& st = self->state;
    report.seconds = seconds;
    report.cpu_seconds = cpu;
    report.dispatched = st.dispatched;
    report.messages = st.messages;
    st.promise.deliver(std::move(report));
  };
  auto fail = [=](caf::error& err) { self->state.promise.deliver(err); };
  if (st.table.all_done())
    self->request(st.reporter, caf::infinite, atom::finish_v).then(deliver, fail);
  else
    self->request(st.reporter, caf::infinite, atom::stop_v).then(deliver, fail);
  st.messages += 2;
}

void finish_if_done(coordinator_pointer self) {
  auto& st = self->state;
  if (!st.finished && (st.table.all_done() || (st.stopping && !anything_running(st))))
    finish(self);
}

void compile_then_queue(coordinator_pointer self, uint64_t id, artefact a);

// The generator's word on an evaluated version: the operator's final result, or the next
// version to evaluate.
void follow(coordinator_pointer self, uint64_t id, generation_step step, eval_result evaluated) {
  auto& st = self->state;
  ++st.messages;
  if (st.finished || st.table.state_of(id) != job_table::state::reviewing)
    return; // abandoned meanwhile (no evaluator left)
  // Every evaluated version is journaled: a resumed campaign takes up from there.
  if (st.cfg.numbered_versions)
    report(self, atom::revise_v, std::move(evaluated));
  if (step.final) {
    st.table.close(id);
    report(self, atom::result_v, std::move(step.result));
    finish_if_done(self);
    return;
  }
  auto version = st.table.revise(id);
  spdlog::info("coordinator: job {} ({}) goes on with version {}", id, st.table.job(id).op_name,
               version);
  compile_then_queue(self, id, std::move(step.next));
}

// An operator's version is evaluated (or ended without an evaluation): its result goes to
// the generator, which makes it final or writes the next version.
void review(coordinator_pointer self, uint64_t id, eval_result result) {
  auto& st = self->state;
  if (st.cfg.numbered_versions)
    result.version = st.table.version(id);
  ++st.messages;
  self->request(st.generator, st.cfg.generate_timeout, atom::revise_v, result)
    .then([=](generation_step& step) { follow(self, id, std::move(step), result); },
          [=](caf::error& err) {
            spdlog::error("coordinator: generator did not answer for job {} ({}): {}; its "
                          "last version stands", id, result.op_name, describe(err));
            generation_step step;
            step.result = result;
            follow(self, id, std::move(step), result);
          });
}

// A version that ends without an evaluation: no kernel, a failed build, a failed generator.
void end_version(coordinator_pointer self, uint64_t id, eval_result failed) {
  auto& st = self->state;
  if (st.finished || st.table.state_of(id) != job_table::state::generating)
    return;
  st.table.end_version(id, std::move(failed));
  review(self, id, st.table.merged(id));
  finish_if_done(self);
}

// Records the end of one attempt of a job: faults are retried, a terminal shard is journaled,
// and an operator whose every shard is terminal goes to the generator.
void settle(coordinator_pointer self, eval_result result) {
  auto& st = self->state;
  if (st.finished)
    return; // halted: the reports are written, --resume runs this job again
  auto verdict = st.table.finish(result);
  if (verdict == job_table::verdict::stale) {
    spdlog::debug("coordinator: ignoring stale result of job {} attempt {}", result.job_id,
                  result.attempt);
    return;
  }
  auto id = st.table.operator_of(result.job_id);
  if (verdict == job_table::verdict::retry) {
    spdlog::warn("coordinator: job {} ({}) attempt {} {}; retrying", result.job_id,
                 result.op_name, result.attempt, to_string(result.outcome));
    report(self, atom::requeue_v, std::move(result));
    return;
  }
  if (st.table.sharded(id))
    report(self, atom::shard_v, std::move(result));
  if (verdict == job_table::verdict::terminal)
    review(self, id, st.table.merged(id));
}

// With no evaluator left, every unfinished job ends as an infrastructure failure.
void fail_remaining(coordinator_pointer self, const std::string& why) {
  auto& st = self->state;
  if (st.stopping)
    return; // stopped on purpose: the remaining jobs are left for --resume
  for (auto id : st.table.unfinished()) {
    report(self, atom::result_v, failed_result(st.table.abandon(id), outcome::infra_error, why));
  }
}

// An evaluator is gone (down, or its request failed): its job ends as an infrastructure
// failure (and is retried while attempts remain); it never gets another job.
void lose_evaluator(coordinator_pointer self, const caf::actor_addr& who, const std::string& why) {
  auto& st = self->state;
  auto idle = std::find_if(st.idle.begin(), st.idle.end(),
                           [&](const evaluator_actor& e) { return e.address() == who; });
  auto job = st.busy.find(who);
  if (idle == st.idle.end() && job == st.busy.end())
    return; // already counted
  if (idle != st.idle.end())
    st.idle.erase(idle);
  --st.evaluators_alive;
  if (job != st.busy.end()) {
    spdlog::error("coordinator: evaluator lost during job {} ({}): {}", job->second.job_id,
                  job->second.op_name, why);
    auto failed = failed_result(job->second, outcome::infra_error, "evaluator lost: " + why);
    st.busy.erase(job);
    settle(self, std::move(failed));
  } else {
    spdlog::error("coordinator: idle evaluator lost: {}", why);
  }
  if (st.evaluators_alive == 0)
    fail_remaining(self, "no evaluator left: " + why);
  dispatch(self);
  finish_if_done(self);
}

void dispatch(coordinator_pointer self) {
  auto& st = self->state;
  while (!st.stopping && !st.idle.empty() && st.table.queued() > 0) {
    auto worker = st.idle.back();
    st.idle.pop_back();
    auto job = *st.table.next(st.evaluators_alive);
    job.settings = st.cfg.job_settings;
    job.stream_tag = st.cfg.stream_tag;
    st.busy[worker.address()] = job;
    ++st.dispatched;
    ++st.messages;
    spdlog::debug("coordinator: job {} ({}{}) attempt {} dispatched", job.job_id, job.op_name,
                  job.shard.is_part() ? ", " + span_text(job.shard) : std::string(), job.attempt);
    self->request(worker, st.cfg.evaluate_timeout, atom::evaluate_v, job)
      .then(
        [=](eval_result& r) {
          auto& st = self->state;
          if (st.busy.erase(worker.address()) == 0)
            return; // the evaluator was declared lost meanwhile
          ++st.messages;
          if (r.job_id != job.job_id || r.attempt != job.attempt)
            r = failed_result(job, outcome::infra_error, "evaluator answered for another job");
          r.shard = job.shard;
          settle(self, std::move(r));
          st.idle.push_back(worker);
          dispatch(self);
          finish_if_done(self);
        },
        [=](caf::error& err) { lose_evaluator(self, worker.address(), describe(err)); });
  }
}

// Native artefacts are built by the compile pool before they join the queue; a build that
// fails ends the job. Compiles thus run ahead while evaluators work on earlier jobs.
void compile_then_queue(coordinator_pointer self, uint64_t id, artefact a) {
  auto& st = self->state;
  if (a.kind == kernel_kind::none) {
    // The generator has no kernel for this version: a failed result, which goes back to it.
    auto job = st.table.job(id);
    job.kernel = a;
    end_version(self, id, failed_result(job, outcome::no_kernel, a.why_none));
    return;
  }
  // One build per version, for every shard of it.
  auto job = st.table.job(id);
  job.kernel = std::move(a);
  prepare_job(
    self, st.compiler, std::move(job),
    [=](eval_job ready) {
      auto& st = self->state;
      ++st.messages;
      st.table.set_artefact(id, std::move(ready.kernel));
      // Every input finished before the resume: nothing to run.
      if (st.table.state_of(id) == job_table::state::reviewing)
        review(self, id, st.table.merged(id));
      dispatch(self);
    },
    [=](eval_result failed) {
      ++self->state.messages;
      end_version(self, id, std::move(failed));
    });
}

void start(coordinator_pointer self) {
  auto& st = self->state;
  st.table.split_at_dispatch(st.cfg.shards_per_slot > 0);
  auto plans = plan_operators(st.cfg.work, st.cfg.estimates, st.cfg.earlier_shards, st.idle.size(),
                              st.cfg.shards_per_slot, st.cfg.max_shard_seconds);
  for (size_t i = 0; i < st.cfg.work.ops.size(); ++i) {
    auto& op = st.cfg.work.ops[i];
    auto first = st.cfg.first_versions.find(op.op_name);
    auto id = st.table.add(op, first == st.cfg.first_versions.end() ? 1 : first->second, std::move(plans[i]));
    ++st.messages;
    self->request(st.generator, st.cfg.generate_timeout, atom::generate_v, op.op_name)
      .then(
        [=](artefact& a) {
          ++self->state.messages;
          compile_then_queue(self, id, std::move(a));
        },
        [=](caf::error& err) {
          auto job = self->state.table.job(id);
          end_version(self, id, failed_result(job, outcome::infra_error, "generator failed: " + describe(err)));
        });
  }
  spdlog::info("coordinator: {} operators over {} evaluators", st.table.size(), st.idle.size());
  finish_if_done(self);
}

} // namespace

coordinator_actor::behavior_type coordinator(coordinator_pointer self, coordinator_config cfg,
                                             generator_actor generator,
                                             std::vector<evaluator_actor> evaluators,
                                             reporter_actor reporter, compile_pool_actor compiler) {
  if (auto err = validate(cfg)) {
    self->quit(err);
    return coordinator_actor::behavior_type::make_empty_behavior();
  }
  auto& st = self->state;
  st.table = job_table(cfg.max_attempts);
  st.cfg = std::move(cfg);
  st.generator = std::move(generator);
  st.reporter = std::move(reporter);
  st.compiler = std::move(compiler);
  st.evaluators_alive = evaluators.size();
  for (auto& e : evaluators)
    self->monitor(e);
  st.idle = std::move(evaluators);
  self->set_down_handler([=](caf::down_msg& dm) {
    ++self->state.messages;
    lose_evaluator(self, dm.source, "evaluator down: " + describe(dm.reason));
  });
  return {
    [=](atom::run) -> caf::typed_response_promise<sweep_report> {
      auto& st = self->state;
      if (st.started) {
        auto rp = self->make_response_promise<sweep_report>();
        rp.deliver(make_error(errc::bad_input, "coordinator: the sweep is already running"));
        return rp;
      }
      st.started = true;
      st.started_at = std::chrono::steady_clock::now();
      st.cpu_at_start = process_cpu_seconds();
      st.promise = self->make_response_promise<sweep_report>();
      if (st.idle.empty()) {
        for (auto& op : st.cfg.work.ops)
          st.table.add(op);
        fail_remaining(self, "no evaluators");
        finish_if_done(self);
        return st.promise;
      }
      start(self);
      return st.promise;
    },
    [=](atom::join, std::vector<evaluator_actor>& fresh) {
      auto& st = self->state;
      spdlog::info("coordinator: {} evaluators joined", fresh.size());
      for (auto& e : fresh) {
        self->monitor(e);
        st.idle.push_back(e);
        ++st.evaluators_alive;
      }
      if (st.started)
        dispatch(self);
    },
    [=](atom::stop) {
      auto& st = self->state;
      if (st.stopping)
        return;
      st.stopping = true;
      spdlog::warn("coordinator: stopping: no new jobs; {} running finish", st.busy.size());
      if (st.started)
        finish_if_done(self);
    },
    [=](atom::halt) {
      auto& st = self->state;
      if (st.finished)
        return;
      if (!st.busy.empty())
        spdlog::warn("coordinator: halting: {} running jobs abandoned", st.busy.size());
      st.stopping = true;
      st.busy.clear();
      if (st.started)
        finish(self);
    },
  };
}

} // namespace bb
