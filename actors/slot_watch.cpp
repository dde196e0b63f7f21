#include "actors/slot_watch.hpp"

#include <caf/typed_event_based_actor.hpp>

namespace bb {

namespace {

struct slot_watch_state {
  static inline const char* name = "slot_watch";
};

evaluator_actor::behavior_type slot_watch(evaluator_actor::stateful_pointer<slot_watch_state> self,
                                          evaluator_actor inner, std::shared_ptr<progress_board> board,
                                          size_t slot) {
  self->link_to(inner);
  self->attach_functor([board, slot] { board->slot_gone(slot); });
  return {
    [=](atom::evaluate, const eval_job& job) -> caf::typed_response_promise<eval_result> {
      auto rp = self->make_response_promise<eval_result>();
      board->slot_busy(slot, job.op_name);
      // The coordinator bounds the request; this one waits as long as the evaluator takes.
      self->request(inner, caf::infinite, atom::evaluate_v, job)
        .then(
          [=](eval_result& r) mutable {
            board->slot_idle(slot);
            rp.deliver(std::move(r));
          },
          [=](caf::error& err) mutable {
            board->slot_idle(slot);
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [](atom::ping) { return atom::pong_v; },
  };
}

} // namespace

std::vector<evaluator_actor> watch_slots(caf::actor_system& sys, const std::vector<evaluator_actor>& evaluators,
                                         const std::string& node, std::shared_ptr<progress_board> board) {
  std::vector<evaluator_actor> out;
  for (auto& e : evaluators)
    out.push_back(sys.spawn(slot_watch, e, board, board->add_slot(node)));
  return out;
}

} // namespace bb
