#pragma once

// What actors say to each other: the project's CAF type-id block, atoms, inspect functions for
// the records, and every typed actor interface.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "messages/authoring.hpp"
#include "messages/records.hpp"

// `inspect` of a record from its field list (messages/records.hpp, BB_FIELDS_...): CAF
// serializes its members in that order.
#define BB_INSPECT_MEMBER(r, x, field) , x.field
#define BB_INSPECT(type, ...)                                                                     \
  template <class Inspector>                                                                      \
  typename Inspector::result_type inspect(Inspector& f, type& x) {                                \
    return f(caf::meta::type_name(#type)                                                          \
               MSGPACK_PP_SEQ_FOR_EACH(BB_INSPECT_MEMBER, x, MSGPACK_PP_VARIADIC_TO_SEQ(__VA_ARGS__))); \
  }

namespace bb {

/// What a sweep ended with, sent back to whoever started it.
struct sweep_report {
  /// The three score lines.
  std::string scores_text;
  uint64_t jobs = 0;
  /// Jobs that failed as a whole (fails_job: any outcome but ok and the skipped ones), not
  /// jobs that ran and got an input wrong.
  uint64_t failed_jobs = 0;
  /// Where the reports were written; empty with --disable-output-logs.
  std::string log_dir;
  /// Where the sweep's time went, per slot and phase (results/profile.hpp).
  std::string profile_text;
  /// The sweep was stopped before every job was terminal: the reports say so, and
  /// --resume runs the rest.
  bool partial = false;
  /// The sweep's pace as its coordinator saw it: seconds from `run` until every job was
  /// terminal, the jobs it dispatched (shards and retries included), the messages its actor
  /// handled (in and out), and the CPU seconds of its whole process meanwhile.
  double seconds = 0.0;
  uint64_t dispatched = 0;
  uint64_t messages = 0;
  double cpu_seconds = 0.0;
};

BB_INSPECT(artefact, BB_FIELDS_ARTEFACT)

BB_INSPECT(compile_outcome, BB_FIELDS_COMPILE_OUTCOME)

BB_INSPECT(input_failure, BB_FIELDS_INPUT_FAILURE)

BB_INSPECT(cached_reference, BB_FIELDS_CACHED_REFERENCE)

BB_INSPECT(shard_span, BB_FIELDS_SHARD_SPAN)

BB_INSPECT(eval_job, BB_FIELDS_EVAL_JOB)

BB_INSPECT(correctness_record, BB_FIELDS_CORRECTNESS_RECORD)

BB_INSPECT(performance_record, BB_FIELDS_PERFORMANCE_RECORD)

BB_INSPECT(provenance, BB_FIELDS_PROVENANCE)

BB_INSPECT(eval_result, BB_FIELDS_EVAL_RESULT)

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_brief& x) {
  return f(caf::meta::type_name("op_brief"), x.op_name, x.folder, x.schema, x.examples);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, author_request& x) {
  return f(caf::meta::type_name("author_request"), x.op, x.version, x.feedback, x.previous,
           x.log_dir);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, author_reply& x) {
  return f(caf::meta::type_name("author_reply"), x.code, x.kind, x.why, x.transient,
           x.session_dir, x.note, x.tries, x.seconds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generation_step& x) {
  return f(caf::meta::type_name("generation_step"), x.final, x.result, x.next);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sweep_report& x) {
  return f(caf::meta::type_name("sweep_report"), x.scores_text, x.jobs, x.failed_jobs, x.log_dir,
           x.profile_text, x.partial, x.seconds, x.dispatched, x.messages, x.cpu_seconds);
}

} // namespace bb

CAF_BEGIN_TYPE_ID_BLOCK(bb, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(bb, (bb::artefact))
  CAF_ADD_TYPE_ID(bb, (bb::eval_job))
  CAF_ADD_TYPE_ID(bb, (bb::correctness_record))
  CAF_ADD_TYPE_ID(bb, (bb::performance_record))
  CAF_ADD_TYPE_ID(bb, (bb::provenance))
  CAF_ADD_TYPE_ID(bb, (bb::eval_result))
  CAF_ADD_TYPE_ID(bb, (bb::sweep_report))
  CAF_ADD_TYPE_ID(bb, (bb::compile_outcome))
  CAF_ADD_TYPE_ID(bb, (bb::op_brief))
  CAF_ADD_TYPE_ID(bb, (bb::author_request))
  CAF_ADD_TYPE_ID(bb, (bb::author_reply))
  CAF_ADD_TYPE_ID(bb, (bb::generation_step))
  CAF_ADD_ATOM(bb, bb::atom, evaluate, "evaluate")
  CAF_ADD_ATOM(bb, bb::atom, generate, "generate")
  CAF_ADD_ATOM(bb, bb::atom, result, "result")
  CAF_ADD_ATOM(bb, bb::atom, finish, "finish")
  CAF_ADD_ATOM(bb, bb::atom, run, "run")
  CAF_ADD_ATOM(bb, bb::atom, ping, "ping")
  CAF_ADD_ATOM(bb, bb::atom, pong, "pong")
  CAF_ADD_ATOM(bb, bb::atom, compile, "compile")
  CAF_ADD_ATOM(bb, bb::atom, lost, "lost")
  CAF_ADD_ATOM(bb, bb::atom, join, "join")
  CAF_ADD_ATOM(bb, bb::atom, requeue, "requeue")
  CAF_ADD_ATOM(bb, bb::atom, revise, "revise")
  CAF_ADD_ATOM(bb, bb::atom, write, "write")
  CAF_ADD_ATOM(bb, bb::atom, stop, "stop")
  CAF_ADD_ATOM(bb, bb::atom, halt, "halt")
  CAF_ADD_ATOM(bb, bb::atom, shard, "shard")
  CAF_ADD_ATOM(bb, bb::atom, tick, "tick")
  CAF_ADD_ATOM(bb, bb::atom, cancel, "cancel")
  CAF_ADD_ATOM(bb, bb::atom, status, "status")
CAF_END_TYPE_ID_BLOCK(bb)

namespace bb {

/// The EVALUATOR actor: runs jobs on one device slot through its bbrunner process.
using evaluator_actor = caf::typed_actor<
  // Evaluate every input of one job; always answers with a terminal result, never an error.
  caf::replies_to<atom::evaluate, eval_job>::with<eval_result>,
  // Liveness probe.
  caf::replies_to<atom::ping>::with<atom::pong>>;

/// The GENERATOR actor: turns an operator into kernel artefacts, one version at a time.
using generator_actor = caf::typed_actor<
  // Produce the first kernel to evaluate for one operator (full name: aten.relu.default);
  // kind none when there is no kernel (its why_none says why).
  caf::replies_to<atom::generate, std::string>::with<artefact>,
  // The evaluation of the latest version: the next version to evaluate, or the final result.
  caf::replies_to<atom::revise, eval_result>::with<generation_step>>;

/// An AUTHOR actor (detached: it blocks on HTTP or on an agent process): writes one version
/// of one operator's kernel.
using author_actor = caf::typed_actor<
  // Write the kernel asked for; always answers, with code or with why there is none.
  caf::replies_to<atom::write, author_request>::with<author_reply>>;

/// The COMPILE POOL actor: builds native artefacts on CPU workers beside the evaluators.
using compile_pool_actor = caf::typed_actor<
  // Build one artefact (kind cpp or cu) into a loadable object, or find it in the cache.
  caf::replies_to<atom::compile, artefact>::with<compile_outcome>>;

/// The REPORTER actor: consumes results as they arrive and writes the run's files.
using reporter_actor = caf::typed_actor<
  // Record one operator's terminal result: journal line, progress, its record; the growing
  // reports show it at their next rewrite.
  caf::reacts_to<atom::result, eval_result>,
  // Record one shard's terminal result (its operator's result follows once every shard of
  // it is terminal): journal line, progress.
  caf::reacts_to<atom::shard, eval_result>,
  // Record an attempt that failed as a whole and goes back to the queue: journal line.
  caf::reacts_to<atom::requeue, eval_result>,
  // Record an evaluated kernel version of a generative backend: journal line.
  caf::reacts_to<atom::revise, eval_result>,
  // From itself, once the next rewrite is due: rewrite the growing reports if anything
  // changed since the last.
  caf::reacts_to<atom::tick>,
  // All jobs are terminal: write the reports and answer with the scores.
  caf::replies_to<atom::finish>::with<sweep_report>,
  // The sweep was stopped: write the reports marked partial and answer with the scores so far.
  caf::replies_to<atom::stop>::with<sweep_report>>;

/// A REMOTE SLOT actor: one slot of a bbnode, an evaluator to the coordinator.
using remote_slot_actor = evaluator_actor::extend<
  // The node's result for the job in flight (from the link's thread).
  caf::reacts_to<atom::result, eval_result>,
  // The node is lost: fail the job in flight and quit.
  caf::reacts_to<atom::lost, std::string>>;

/// The SLOT POOL of `bbcluster serve`: the cluster's evaluators shared by many requests of
/// many clients, a free slot taking the next job of the next client in turn.
using slot_pool_actor = caf::typed_actor<
  // Evaluate one job of (client, request) on the next free slot in the client's turn; always
  // answers with a terminal result (infra_error when the job was cancelled or its slot lost).
  caf::replies_to<atom::evaluate, std::string, std::string, eval_job>::with<eval_result>,
  // Drop the queued jobs of (client, request); a running one finishes, its result unused.
  caf::reacts_to<atom::cancel, std::string, std::string>,
  // Slots, busy slots and queued jobs per client, as a JSON object.
  caf::replies_to<atom::status>::with<std::string>,
  // Slots that joined (a node that came back) take jobs from now on.
  caf::reacts_to<atom::join, std::vector<evaluator_actor>>>;

/// The COORDINATOR actor: splits a suite into jobs and drives each to a terminal state.
using coordinator_actor = caf::typed_actor<
  // Run the sweep; answers when every job is terminal and the reports are written.
  caf::replies_to<atom::run>::with<sweep_report>,
  // New evaluators (a node that joined or came back) take jobs from now on.
  caf::reacts_to<atom::join, std::vector<evaluator_actor>>,
  // Stop dispatching: running jobs finish, queued ones are left for --resume; `run` answers
  // with partial reports once no job runs.
  caf::reacts_to<atom::stop>,
  // Stop at once: `run` answers with partial reports now; running jobs are abandoned (their
  // results are ignored, --resume runs them again).
  caf::reacts_to<atom::halt>>;

} // namespace bb
