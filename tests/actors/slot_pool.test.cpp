#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <nlohmann/json.hpp>

#include "actors/slot_pool.hpp"
#include "deterministic.hpp"

using namespace bb;

namespace {

// An evaluator that keeps each job until the test releases it (through a ping, so that the
// answer is delivered in the actor's own context), recording the order jobs came in.
struct slot_log {
  std::vector<std::string> order; // op names as the slot took them
  caf::typed_response_promise<eval_result> promise;
  eval_job job;
  bool holding = false;
};

evaluator_actor::behavior_type held_slot(evaluator_actor::pointer self, std::shared_ptr<slot_log> log) {
  return {
    [self, log](atom::evaluate, const eval_job& job) {
      log->order.push_back(job.op_name);
      log->job = job;
      log->holding = true;
      log->promise = self->make_response_promise<eval_result>();
      return log->promise;
    },
    [log](atom::ping) {
      if (log->holding) {
        log->holding = false;
        eval_result r;
        r.job_id = log->job.job_id;
        r.op_name = log->job.op_name;
        log->promise.deliver(r);
      }
      return atom::pong_v;
    },
  };
}

eval_job job_named(const std::string& name, uint64_t id) {
  eval_job j;
  j.job_id = id;
  j.op_name = name;
  return j;
}

struct pool_fixture : test::deterministic_system {
  std::shared_ptr<slot_log> log = std::make_shared<slot_log>();
  evaluator_actor slot = keep(sys->spawn(held_slot, log));
  slot_pool_actor pool = keep(sys->spawn(slot_pool, std::vector<evaluator_actor>{slot}, caf::timespan{std::chrono::hours(1)}, false));
  caf::scoped_actor self{*sys};
  // Lets the slot answer its held job and the pool hand it the next.
  void release() {
    caf::anon_send(slot, atom::ping_v);
    sched->run();
  }
};

} // namespace

TEST_CASE("next_client takes the clients with queued jobs in turn, after the last one served", "[actors]") {
  std::map<std::string, size_t> queued{{"a", 3}, {"b", 0}, {"c", 1}};
  CHECK(next_client(queued, "") == "a");
  CHECK(next_client(queued, "a") == "c");
  CHECK(next_client(queued, "c") == "a");
  CHECK(next_client(queued, "b") == "c");
  CHECK(next_client(queued, "zz") == "a");
  CHECK(next_client({{"a", 0}}, "a").empty());
  CHECK(next_client({}, "").empty());
}

TEST_CASE("the slot pool serves clients round robin, not first come first served", "[actors]") {
  pool_fixture f;
  // Sent as messages (the answers wait in the test's mailbox): the scheduler runs only when
  // the test says.
  std::vector<std::pair<std::string, std::string>> sent = {
    {"big", "b1"}, {"big", "b2"}, {"big", "b3"}, {"big", "b4"}, {"small", "s1"}, {"small", "s2"}};
  uint64_t id = 0;
  for (auto& [client, op] : sent)
    f.self->send(f.pool, atom::evaluate_v, client, "r-" + client, job_named(op, ++id));
  f.sched->run();
  REQUIRE(f.log->order == std::vector<std::string>{"b1"});
  for (int i = 0; i < 6; ++i)
    f.release();
  CHECK(f.log->order == std::vector<std::string>{"b1", "s1", "b2", "s2", "b3", "b4"});
  size_t answered = 0;
  while (f.self->mailbox().size() > 0)
    f.self->receive([&](eval_result&) { ++answered; });
  CHECK(answered == 6);
}

TEST_CASE("a cancelled request's queued jobs end as cancelled, and other requests go on", "[actors]") {
  pool_fixture f;
  f.self->send(f.pool, atom::evaluate_v, std::string("a"), std::string("r1"), job_named("a1", 1));
  f.self->send(f.pool, atom::evaluate_v, std::string("a"), std::string("r1"), job_named("a2", 2));
  f.self->send(f.pool, atom::evaluate_v, std::string("a"), std::string("r2"), job_named("a3", 3));
  f.self->send(f.pool, atom::evaluate_v, std::string("b"), std::string("r3"), job_named("b1", 4));
  f.sched->run();
  std::string status;
  f.self->send(f.pool, atom::status_v);
  f.sched->run();
  f.self->receive([&](std::string& s) { status = s; });
  auto st = nlohmann::json::parse(status);
  CHECK(st["slots"] == 1);
  CHECK(st["busy"] == 1);
  CHECK(st["queued"]["a"] == 2);
  CHECK(st["queued"]["b"] == 1);
  caf::anon_send(f.pool, atom::cancel_v, std::string("a"), std::string("r1"));
  f.sched->run();
  // a2 was cancelled in the queue: answered at once, as an infrastructure failure.
  std::vector<eval_result> got;
  while (f.self->mailbox().size() > 0)
    f.self->receive([&](eval_result& r) { got.push_back(r); });
  REQUIRE(got.size() == 1);
  CHECK(got[0].op_name == "a2");
  CHECK(got[0].outcome == outcome::infra_error);
  CHECK(got[0].detail.find("cancelled") != std::string::npos);
  // A job of r1 that comes after its cancel (its coordinator had sent it meanwhile) never
  // queues.
  f.self->send(f.pool, atom::evaluate_v, std::string("a"), std::string("r1"), job_named("late", 5));
  f.sched->run();
  bool late_cancelled = false;
  f.self->receive([&](eval_result& r) { late_cancelled = r.op_name == "late" && r.outcome == outcome::infra_error; });
  CHECK(late_cancelled);
  // The running a1 finishes; then b1 (b's turn), then a3 (r2 was not cancelled).
  f.release();
  f.release();
  f.release();
  CHECK(f.log->order == std::vector<std::string>{"a1", "b1", "a3"});
}
