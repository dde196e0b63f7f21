// sim_runner: a stand-in for bbrunner in the simulated cluster (bench/cluster.cpp). It speaks
// bbrunner's protocol (messages/runner_protocol.hpp) over the same inherited socket: hello,
// configure/ready, evaluate with a progress frame before each input and one result, resolve,
// check, stop. Instead of evaluating, it waits the modelled time of each input
// (sim/sim_model.hpp) divided by $BBCLUSTER_SIM_SPEEDUP, and answers with records of a
// kernel that is correct and as fast as aten. It links neither torch nor CAF: many of them
// run on one machine, one per simulated GPU slot. Only for the benchmark; evaluator.runner
// names it.

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "sim/sim_model.hpp"
#include "messages/runner_protocol.hpp"
#include "process/runner_loop.hpp"
#include "suite/args.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Waits until `until`, or until the evaluator's end of the socket closes (then exits: nobody
// waits for the result). The evaluator sends nothing during a job.
void wait_or_exit(int fd, clock_type::time_point until) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - clock_type::now()).count();
    if (left <= 0)
      return;
    // To the nanosecond: a compressed input lasts milliseconds, and whole milliseconds lost
    // on each would shorten the sweep.
    timespec wait{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    pollfd p{fd, POLLIN, 0};
    if (::ppoll(&p, 1, &wait, nullptr) > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN)))
      std::exit(0);
  }
}

double speedup_of_time() {
  const char* text = std::getenv("BBCLUSTER_SIM_SPEEDUP");
  double x = text ? std::atof(text) : 1.0;
  return x > 0 ? x : 1.0;
}

class simulated_job {
public:
  simulated_job(int fd, const bb::runner_request& req, const bb::runner_options& opts)
    : fd_(fd), job_(req.job), opts_(opts) {
  }

  bb::runner_reply run() {
    auto start = clock_type::now();
    deadline_ = start;
    bb::runner_reply reply;
    reply.kind = bb::runner_reply_kind::result;
    reply.result = bb::result_for(job_, where(opts_));
    auto& r = reply.result;
    bool paired = job_.correctness_inputs == job_.performance_inputs;
    for (size_t i = 0; i < job_.correctness_inputs.size(); ++i) {
      r.correctness.push_back(check(job_.correctness_inputs[i], i, paired));
      if (paired)
        r.performance.push_back(time(job_.performance_inputs[i]));
    }
    if (!paired)
      for (size_t i = 0; i < job_.performance_inputs.size(); ++i) {
        step(bb::input_kind::performance, i);
        spend(bb::sim::input_seconds(job_.op_name, job_.performance_inputs[i], opts_, true));
        r.performance.push_back(time(job_.performance_inputs[i]));
      }
    r.wall_seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    r.phases["time_kernel"] = r.wall_seconds;
    return reply;
  }

  static bb::provenance where(const bb::runner_options& opts) {
    bb::provenance p;
    p.node = opts.node;
    p.device = opts.device == "cuda" ? "simulated GPU" : "simulated CPU";
    p.driver = "simulated";
    p.torch_version = "simulated";
    return p;
  }

private:
  // The job's inputs end at their modelled times from its start: what a frame costs here is
  // within an input's modelled time (which counts a millisecond an input for such), not on
  // top of it, however much the clock is sped up.
  void spend(double modelled_seconds) {
    deadline_ += std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(modelled_seconds / speedup_));
    wait_or_exit(fd_, deadline_);
  }

  void step(bb::input_kind kind, size_t i) {
    bb::runner_reply note;
    note.kind = bb::runner_reply_kind::progress;
    note.text = std::string(bb::to_string(kind)) + " input " + std::to_string(i + 1);
    note.input = kind;
    note.input_index = static_cast<uint32_t>(i);
    bb::send_reply(fd_, note);
  }

  bb::correctness_record check(const std::string& text, size_t i, bool timed) {
    step(bb::input_kind::correctness, i);
    spend(bb::sim::input_seconds(job_.op_name, text, opts_, timed));
    bb::correctness_record c;
    c.op_name = job_.op_name;
    c.args = bb::args::serialize_text(text);
    c.is_correct = true;
    return c;
  }

  bb::performance_record time(const std::string& text) {
    bb::performance_record p;
    p.op_name = job_.op_name;
    p.args = bb::args::serialize_text(text);
    p.reference_time_ms = p.benchmark_time_ms = bb::sim::call_ms(job_.op_name, text, opts_.device);
    p.speedup = 1.0;
    p.successfully_ran = true;
    return p;
  }

  int fd_;
  const bb::eval_job& job_;
  const bb::runner_options& opts_;
  double speedup_ = speedup_of_time();
  clock_type::time_point deadline_;
};

bb::runner_handlers handlers() {
  bb::runner_handlers h;
  h.configure = simulated_job::where;
  h.resolve = [](const std::string& op) { return op + " (simulated)"; };
  h.check = [](const bb::runner_options&) { return std::string(); };
  h.evaluate = [](int fd, const bb::runner_request& req, const bb::runner_options& opts) {
    return simulated_job(fd, req, opts).run();
  };
  return h;
}

} // namespace

int main(int argc, char** argv) {
  int fd = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--fd")
      fd = std::atoi(argv[i + 1]);
  if (fd < 0) {
    std::cerr << "sim_runner: --fd is required (an evaluator starts it)\n";
    return 2;
  }
  return bb::serve_runner(fd, "sim_runner", handlers());
}
