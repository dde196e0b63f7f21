// bbrunner: the sandboxed child of an evaluator. It links libtorch, speaks length-prefixed
// msgpack frames over the inherited socket given by --fd (never stdout), and evaluates one job
// at a time. Its stdout and stderr belong to the kernels and go to the evaluator's log.

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "messages/runner_protocol.hpp"
#include "process/frames.hpp"
#include "runner/runner.hpp"

namespace {

bool send(int fd, const bb::runner_reply& reply) {
  return bb::frames::write_frame(fd, bb::pack(reply));
}

// Test fault injection: BBCLUSTER_TEST_KILL_RUNNER_ON=<op name> makes the runner kill itself
// with SIGKILL when it receives a job for that operator, as a crashing kernel would.
void maybe_inject_fault(const bb::eval_job& job) {
  if (const char* op = std::getenv("BBCLUSTER_TEST_KILL_RUNNER_ON"); op && job.op_name == op)
    std::raise(SIGKILL);
}

bb::runner_reply evaluate(int fd, const bb::runner_request& req, const bb::runner_options& opts) {
  // The job runs in its scratch folder: what a kernel writes stays there. In a sandbox the
  // scratch folder is a fresh one of this runner's: the job's folder is made here, and removed
  // after the job.
  auto home = std::filesystem::current_path();
  std::error_code ec;
  bool made_work_dir = !req.work_dir.empty() && std::filesystem::create_directories(req.work_dir, ec);
  if (!req.work_dir.empty())
    std::filesystem::current_path(req.work_dir, ec);
  bb::runner_reply reply;
  reply.kind = "result";
  reply.result = bb::runner::evaluate_job(req.job, opts, [&](const bb::runner::step& s) {
    bb::runner_reply note;
    note.kind = "progress";
    note.text = s.text;
    note.setup = s.setup;
    note.side = s.side;
    note.input_kind = s.input_kind;
    note.input_index = s.input_index;
    send(fd, note);
  });
  std::filesystem::current_path(home, ec);
  if (made_work_dir)
    std::filesystem::remove_all(req.work_dir, ec);
  std::cout.flush();
  std::cerr.flush();
  return reply;
}

// The request loop: configure once, then jobs until "stop" or the evaluator goes away.
int serve(int fd) {
  bb::runner_options opts;
  bb::runner_reply hello;
  hello.kind = "hello";
  if (!send(fd, hello))
    return 3;
  for (;;) {
    std::string frame;
    auto st = bb::frames::read_frame(fd, frame, -1);
    if (st == bb::frames::read_status::closed)
      return 0;
    if (st != bb::frames::read_status::ok) {
      std::cerr << "bbrunner: cannot read from the evaluator\n";
      return 3;
    }
    bb::runner_request req;
    try {
      req = bb::unpack<bb::runner_request>(frame);
    } catch (const std::exception& e) {
      std::cerr << "bbrunner: malformed request: " << e.what() << "\n";
      return 3;
    }
    bb::runner_reply reply;
    if (req.kind == "stop") {
      return 0;
    } else if (req.kind == "configure") {
      opts = req.options;
      bb::runner::apply_options(opts);
      reply.kind = "ready";
      reply.where = bb::runner::describe(opts);
    } else if (req.kind == "resolve") {
      reply.kind = "schemas";
      for (auto& op : req.ops)
        reply.schemas.push_back(bb::runner::resolve_schema(op));
    } else if (req.kind == "check") {
      reply.kind = "checked";
      reply.text = bb::runner::check_device(opts);
    } else {
      maybe_inject_fault(req.job);
      reply = evaluate(fd, req, opts);
    }
    if (!send(fd, reply))
      return 3;
    // A lost CUDA context or a kernel that replaced the timers: this process is spoiled.
    auto& flags = reply.result.flags;
    if (reply.kind == "result"
        && (bb::spoils_runner(reply.result.outcome)
            || std::find(flags.begin(), flags.end(), "replaces_timer") != flags.end()))
      return 4;
  }
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"bbrunner: evaluates kernels for one evaluator (started by bbnode/bbcluster)"};
  int fd = -1;
  bb::runner_options opts;
  std::vector<std::string> print_inputs;
  app.add_option("--fd", fd, "inherited socket to the evaluator");
  app.add_option("--print-inputs", print_inputs,
                 "OP ARGS: print the tensors built for one input (sizes, strides, checksum), exit")
    ->expected(2);
  app.add_option("--device", opts.device, "cpu or cuda, for --print-inputs");
  CLI11_PARSE(app, argc, argv);
  if (!print_inputs.empty()) {
    std::cout << bb::runner::describe_input(print_inputs[0], print_inputs[1], opts);
    return 0;
  }
  if (fd < 0) {
    std::cerr << "bbrunner: --fd is required (bbrunner is started by an evaluator)\n";
    return 2;
  }
  return serve(fd);
}
