// bbrunner: the sandboxed child of an evaluator. It links libtorch, speaks length-prefixed
// msgpack frames over the inherited socket given by --fd (never stdout), and evaluates one job
// at a time. Its stdout and stderr belong to the kernels and go to the evaluator's log.

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <execinfo.h>
#include <fcntl.h>
#include <ucontext.h>
#include <unistd.h>

#include "artefacts/jit_cache.hpp"
#include "messages/runner_protocol.hpp"
#include "process/files.hpp"
#include "process/runner_loop.hpp"
#include "runner/code_guard.hpp"
#include "runner/guards.hpp"
#include "runner/python_kernel.hpp"
#include "runner/timing.hpp"
#include "runner/runner.hpp"

namespace {

// Test fault injection: BBCLUSTER_TEST_KILL_RUNNER_ON=<op name> makes the runner kill itself
// with SIGKILL when it receives a job for that operator, as a crashing kernel would.
void maybe_inject_fault(const bb::eval_job& job) {
  if (const char* op = std::getenv("BBCLUSTER_TEST_KILL_RUNNER_ON"); op && job.op_name == op)
    std::raise(SIGKILL);
}

// FlagGems' autotuner measures each kernel's configurations on a shape's first call and keeps
// what it chose in a database under $FLAGGEMS_CACHE_DIR, which it opens once, on import. Before
// the runner's first Python kernel loads, the databases the store keeps beside the kernels'
// entries (its flaggems/ folder, fed by the evaluator after untampered jobs) are merged into
// this runner's, so a shape tuned by an earlier run or runner is not measured again.
void seed_flag_gems_tuning(const bb::runner_request& req) {
  const char* own = std::getenv("FLAGGEMS_CACHE_DIR");
  if (req.jit_entry.empty() || !own || !*own)
    return;
  auto store = std::filesystem::path(req.jit_entry).parent_path() / bb::flag_gems_tuning_folder;
  std::error_code ec;
  if (!std::filesystem::is_directory(store, ec))
    return;
  bb::runner::python_seed_tuning_before_load(store.string(), (std::filesystem::path(own) / "config_cache").string());
}

// A Python kernel's JIT libraries compile into a folder of its own under $BBCLUSTER_JIT_DIR
// (set by the evaluator; in a sandbox, in this runner's private scratch folder), seeded from
// the kernel's entry in the store (none: an empty folder). The JIT folder is emptied first:
// what an earlier kernel left there is never taken for this one's.
void prepare_jit_folder(const bb::runner_request& req) {
  const char* jit = std::getenv("BBCLUSTER_JIT_DIR");
  if (!jit || !*jit || req.job.kernel.kind != bb::kernel_kind::py)
    return;
  std::string why_not;
  bb::remove_tree(jit, why_not);
  auto name = std::filesystem::path(req.jit_entry).filename().string();
  auto folder = std::filesystem::path(jit) / (name.empty() ? "unkept" : name);
  if (auto why = bb::seed_jit_folder(req.jit_entry, folder.string()); !why.empty())
    std::cerr << "bbrunner: the JIT cache's entry is not used: " << why << "\n";
  bb::runner::python_use_jit_folder(folder.string());
  seed_flag_gems_tuning(req);
}

// What bbrunner's own code is doing, for the log of a fatal signal: set at each step of a
// job's start and end, where a fault is not the kernel's.
const char* volatile runner_step = "waiting for a job";

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
  reply.kind = bb::runner_reply_kind::result;
  runner_step = "starting a job (describing the device, finding the operator)";
  reply.result = bb::runner::evaluate_job(req.job, opts, [&](const bb::runner::step& s) {
    runner_step = "evaluating a job (after its first step)";
    bb::runner_reply note;
    if (s.correctness || s.performance) {
      // An input that ended: its records, for the evaluator to stream.
      note.kind = bb::runner_reply_kind::input;
      note.result.job_id = req.job.job_id;
      note.result.attempt = req.job.attempt;
      note.result.op_name = req.job.op_name;
      if (s.correctness)
        note.result.correctness.push_back(*s.correctness);
      if (s.performance)
        note.result.performance.push_back(*s.performance);
      note.input = s.input;
      note.input_index = s.input_index;
      bb::send_reply(fd, note);
      return;
    }
    note.kind = bb::runner_reply_kind::progress;
    note.text = s.text;
    note.setup = s.setup;
    note.side = s.side;
    note.input = s.input;
    note.input_index = s.input_index;
    bb::send_reply(fd, note);
  });
  std::filesystem::current_path(home, ec);
  if (made_work_dir) {
    std::string why_not;
    bb::remove_tree(req.work_dir, why_not);
  }
  std::cout.flush();
  std::cerr.flush();
  return reply;
}


void write_text(const char* text) {
  (void)!write(STDERR_FILENO, text, std::strlen(text));
}

void write_hex(uintptr_t v) {
  char digits[2 + 16 + 1];
  digits[0] = '0';
  digits[1] = 'x';
  for (int i = 0; i < 16; ++i)
    digits[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
  digits[18] = 0;
  write_text(digits);
}

uintptr_t parse_hex(const char*& p) {
  uintptr_t v = 0;
  for (;; ++p) {
    char c = *p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return v;
    v = v * 16 + static_cast<uintptr_t>(d);
  }
}

// A mapping of the process, as /proc/self/maps lists it.
struct mapping {
  bool found = false;
  uintptr_t end = 0;
  bool readable = false;
  bool executable = false;
};

// Finds the mapping of /proc/self/maps that holds `ip` and, with `tell`, writes " in FILE +
// OFFSET" or " (in no mapping)": read with open and read only, which a signal handler may
// call (dladdr takes the loader's lock, which the faulting code may hold).
mapping scan_mappings(uintptr_t ip, bool tell);

void write_mapping_of(uintptr_t ip) {
  scan_mappings(ip, true);
}

mapping scan_mappings(uintptr_t ip, bool tell) {
  static char buf[1 << 16];
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (tell)
      write_text(" (/proc/self/maps unreadable)");
    return {};
  }
  size_t kept = 0;
  for (;;) {
    auto n = ::read(fd, buf + kept, sizeof buf - 1 - kept);
    if (n <= 0)
      break;
    kept += static_cast<size_t>(n);
    buf[kept] = 0;
    // Every whole line: "start-end perms offset dev inode   path".
    char* line = buf;
    for (char* nl; (nl = std::strchr(line, '\n')); line = nl + 1) {
      *nl = 0;
      const char* p = line;
      uintptr_t start = parse_hex(p);
      ++p;
      uintptr_t end = parse_hex(p);
      if (ip >= start && ip < end) {
        mapping m{true, end, false, false};
        while (*p == ' ')
          ++p;
        // The permissions ("r-xp"), then the file offset.
        m.readable = *p == 'r';
        m.executable = *p && p[1] && p[2] == 'x';
        while (*p && *p != ' ')
          ++p;
        while (*p == ' ')
          ++p;
        uintptr_t offset = parse_hex(p);
        const char* path = std::strchr(p, '/');
        if (!path)
          path = std::strchr(p, '[');
        if (tell) {
          write_text(" in ");
          write_text(path ? path : "an anonymous mapping");
          write_text(" + ");
          write_hex(ip - start + offset);
        }
        ::close(fd);
        return m;
      }
    }
    // Keep the unfinished line for the next read.
    kept = static_cast<size_t>(buf + kept - line);
    std::memmove(buf, line, kept);
    if (kept >= sizeof buf - 1)
      kept = 0;
  }
  ::close(fd);
  if (tell)
    write_text(" (in no mapping)");
  return {};
}

// A fatal signal (a kernel's fault, or bbrunner's own) leaves where it happened in the
// runner's log before the process dies of it as it would have: the evaluator still sees the
// signal, and whoever reads the log sees the faulting address, the instruction and the module
// it lies in, the step bbrunner was at and the native stack. (Not Python's faulthandler: it
// re-raises the signal from its own handler, and the stack it leaves for this one is its own.)
void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  write_text("bbrunner: fatal signal ");
  char number[4] = {static_cast<char>('0' + (sig / 10) % 10), static_cast<char>('0' + sig % 10), 0, 0};
  write_text(sig >= 10 ? number : number + 1);
  write_text(" at address ");
  write_hex(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr));
#if defined(__x86_64__)
  auto* uc = static_cast<ucontext_t*>(context);
  auto ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  write_text(", instruction ");
  write_hex(ip);
  auto code = scan_mappings(ip, true);
  auto sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  write_text(", stack pointer ");
  write_hex(sp);
  if (!code.executable) {
    // A jump to no code (through a dangling pointer): the stack cannot be unwound from there
    // (the unwinder would read the instruction and fault again), but the call that jumped left
    // its return address on top of the stack.
    write_text(", return address on the stack ");
    auto stack = scan_mappings(sp, false);
    uintptr_t back = stack.readable && sp + sizeof(uintptr_t) <= stack.end ? *reinterpret_cast<const uintptr_t*>(sp) : 0;
    write_hex(back);
    if (back)
      write_mapping_of(back);
  }
#else
  (void)context;
  mapping code{true, 0, true, true};
#endif
  write_text("; bbrunner was ");
  write_text(runner_step);
  if (code.executable) {
    // Each frame as its module and offset (for addr2line), not backtrace_symbols_fd's names:
    // those come from the loader, under its lock.
    write_text("; native stack:\n");
    void* frames[64];
    int depth = backtrace(frames, 64);
    for (int i = 0; i < depth; ++i) {
      write_text("  ");
      write_hex(reinterpret_cast<uintptr_t>(frames[i]));
      write_mapping_of(reinterpret_cast<uintptr_t>(frames[i]));
      write_text("\n");
    }
  } else {
    write_text("\n");
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// The main thread's faults only run on the alternate stack: a stack overflow in another thread
// (an OpenMP worker, a kernel's own) dies without this line.
void log_fatal_signals() {
  // On a stack of its own: a stack overflow is one of the faults worth telling.
  static char alternate[1 << 16];
  stack_t ss{};
  ss.ss_sp = alternate;
  ss.ss_size = sizeof alternate;
  sigaltstack(&ss, nullptr);
  void* warm[1];
  backtrace(warm, 1); // loads libgcc now, not inside the handler
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    sigaction(sig, &sa, nullptr);
}

// The runner's device, once configured (for what spoils a runner).
std::string runner_device;
// Device memory a runner may hold between jobs: its own workspaces and the L2 flush buffer
// are far less.
constexpr int64_t kept_device_memory_limit = int64_t{2} << 30;

// After each job: a failed graph capture, code the timer relies on rewritten (by the job's
// kernel after its last check, a destructor, a thread), a kernel's Python thread still running
// (it would run beside the next job's timed calls), or device memory a kernel keeps alive past
// its job (the next job's reference and kernel would fail for want of it): the next job gets a
// fresh runner. Each reason but the first two is said on stderr.
bool spoiled() {
  bb::runner::check_all_code();
  if (bb::runner::graph_capture_failed() || !bb::runner::code_finding().empty())
    return true;
  if (auto threads = bb::runner::python_stray_threads(); !threads.empty()) {
    std::cerr << "bbrunner: a kernel's thread (" << threads.front() << ") runs past its job: a fresh runner follows"
              << std::endl;
    return true;
  }
  if (auto held = bb::runner::device_memory_held(runner_device, kept_device_memory_limit); !held.empty()) {
    std::cerr << "bbrunner: " << held << ": a fresh runner follows" << std::endl;
    return true;
  }
  return false;
}

bb::runner_handlers handlers() {
  bb::runner_handlers h;
  h.configure = [](const bb::runner_options& opts) {
    runner_device = opts.device;
    bb::runner::apply_options(opts);
    return bb::runner::describe(opts);
  };
  h.resolve = bb::runner::resolve_schema;
  h.check = bb::runner::check_device;
  h.spoiled = [] {
    try {
      return spoiled();
    } catch (const std::exception& e) {
      // Whatever cannot be told about the process is no state to run another job in.
      std::cerr << "bbrunner: the checks after a job failed (" << e.what() << "): a fresh runner follows" << std::endl;
      return true;
    }
  };
  h.evaluate = [](int fd, const bb::runner_request& req, const bb::runner_options& opts) {
    maybe_inject_fault(req.job);
    runner_step = "preparing the job's JIT folder";
    auto preparing = std::chrono::steady_clock::now();
    prepare_jit_folder(req);
    double prepared = std::chrono::duration<double>(std::chrono::steady_clock::now() - preparing).count();
    runner_step = "evaluating a job";
    // The sweep's settings, as the job carries them, over this runner's own.
    auto reply = evaluate(fd, req, bb::job_options(opts, req.job.settings));
    // The JIT folder and FlagGems' tuning made ready: part of loading the kernel, and of the
    // job's time on the runner (else the evaluator counts it as moving results).
    if (reply.kind == bb::runner_reply_kind::result && prepared > 0.0) {
      reply.result.phases["load_kernel"] += prepared;
      reply.result.wall_seconds += prepared;
    }
    runner_step = "sending a job's result, or waiting for the next job";
    return reply;
  };
  return h;
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
  log_fatal_signals();
  // Which std::filesystem the loader bound (bbrunner's own calls avoid it where it matters:
  // process/files.hpp): said once, for whoever reads a crash's log.
  if (auto lib = bb::std_filesystem_library(); lib.find("libstdc++") == std::string::npos)
    std::cerr << "bbrunner: std::filesystem comes from " << (lib.empty() ? "an unknown library" : lib)
              << ", not libstdc++; folders are removed without it\n";
  return bb::serve_runner(fd, "bbrunner", handlers());
}
