// bbrunner: the sandboxed child of an evaluator. It links libtorch, speaks length-prefixed
// msgpack frames over the inherited socket given by --fd (never stdout), and evaluates one job
// at a time. Its stdout and stderr belong to the kernels and go to the evaluator's log.

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <cstdlib>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "process/frames.hpp"
#include "messages/runner_protocol.hpp"
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

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"bbrunner: evaluates kernels for one evaluator (started by bbnode/bbcluster)"};
  int fd = -1;
  bb::runner::options opts;
  std::vector<std::string> print_inputs;
  app.add_option("--fd", fd, "inherited socket to the evaluator");
  app.add_option("--print-inputs", print_inputs,
                 "OP ARGS: print the tensors built for one input (sizes, strides, checksum), exit")
    ->expected(2);
  app.add_option("--device", opts.device, "cpu or cuda");
  app.add_option("--node", opts.node, "node name for provenance");
  app.add_option("--cpu-warmup", opts.cpu_warmup, "cpu_bench warm-up calls");
  app.add_option("--cpu-runs", opts.cpu_runs, "cpu_bench timed calls");
  app.add_option("--cpu-max-seconds", opts.cpu_max_seconds, "cpu_bench budget per measurement");
  app.add_option("--gpu-warmup-ms", opts.gpu_warmup_ms, "do_bench warm-up budget (ms)");
  app.add_option("--gpu-rep-ms", opts.gpu_rep_ms, "do_bench repetition budget (ms)");
  CLI11_PARSE(app, argc, argv);
  if (!print_inputs.empty()) {
    std::cout << bb::runner::describe_input(print_inputs[0], print_inputs[1], opts);
    return 0;
  }
  if (fd < 0) {
    std::cerr << "bbrunner: --fd is required (bbrunner is started by an evaluator)\n";
    return 2;
  }

  bb::runner_reply hello;
  hello.kind = "hello";
  hello.where = bb::runner::describe(opts);
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
    if (req.kind == "stop")
      return 0;
    if (req.kind == "resolve") {
      bb::runner_reply reply;
      reply.kind = "schemas";
      for (auto& op : req.ops)
        reply.schemas.push_back(bb::runner::resolve_schema(op));
      if (!send(fd, reply))
        return 3;
      continue;
    }
    if (req.kind == "check") {
      bb::runner_reply reply;
      reply.kind = "checked";
      reply.text = bb::runner::check_device(opts);
      if (!send(fd, reply))
        return 3;
      continue;
    }
    maybe_inject_fault(req.job);
    // The job runs in its scratch folder: what a kernel writes stays there.
    auto home = std::filesystem::current_path();
    std::error_code ec;
    // In a sandbox the scratch folder is a fresh one of this runner's: the job's folder is
    // made here, and removed after the job.
    bool made_work_dir = !req.work_dir.empty() && std::filesystem::create_directories(req.work_dir, ec);
    if (!req.work_dir.empty())
      std::filesystem::current_path(req.work_dir, ec);
    bb::runner_reply reply;
    reply.kind = "result";
    reply.result = bb::runner::evaluate_job(req.job, opts, [&](const std::string& step, bool setup) {
      bb::runner_reply note;
      note.kind = "progress";
      note.text = step;
      note.setup = setup;
      send(fd, note);
    });
    std::filesystem::current_path(home, ec);
    if (made_work_dir)
      std::filesystem::remove_all(req.work_dir, ec);
    std::cout.flush();
    std::cerr.flush();
    if (!send(fd, reply))
      return 3;
    // A lost CUDA context or a kernel that replaced the timers: this process is spoiled.
    auto& flags = reply.result.flags;
    if (bb::spoils_runner(reply.result.outcome)
        || std::find(flags.begin(), flags.end(), "replaces_timer") != flags.end())
      return 4;
  }
}
