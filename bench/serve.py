#!/usr/bin/env python3
"""The service benchmark: `bbcluster serve` measured side by side in one run.

1. Latency. One relu kernel (BackendBench's smoke suite) evaluated again and again on a warm
   service with the real runner, against the same evaluation as a fresh `bbcluster` command
   (and, where .anchors/backendbench is present, as a fresh BackendBench process): the median
   wall time from the call to its result, the runner's own time for the job, and the
   service's overhead beyond it.
2. Throughput. Many clients at once, each submitting small kernels, to 1, 2 and 4 slots whose
   runner is sim_runner (it waits each input's modelled time instead of evaluating: a stand-in
   for GPU work on a CPU machine): evaluations per second, and the share of slot time spent
   evaluating (goal >= 0.9 with enough queued work).
3. Fairness. One client submits many kernels, another a few at the same time on one slot: the
   few finish within twice their time on an idle service (goal).

   On a GPU machine also: many clients' small kernels on the real runner and the GPU.

Usage: bench/serve.py [--bin build/bin] [--clients 64] [--kernels 50] [--slots 1,2,4]
                      [--large 1000] [--speedup 10] [--quick] [--gpu-clients 64] [--gpu-kernels 50]
                      [--only latency,gpu,throughput,fairness]
Needs the Python client's dependencies (pyzmq, msgpack: scripts/setup.sh installs them).
"""

import argparse
import concurrent.futures
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "client"))
from bbcluster_client import Client  # noqa: E402

RELU = """import torch
def relu_kernel_impl(x):
    return torch.clamp(x, min=0)
"""

# Short CPU timing: the latency is the service's and the runner's, not a long timer's.
QUICK_TIMER = {"timing.cpu_runs": "5", "timing.cpu_warmup": "1"}
# Short do_bench budgets for the GPU's throughput: many small evaluations.
GPU_TIMER = {"timing.gpu_warmup_ms": "5", "timing.gpu_rep_ms": "20"}


class Server:
    def __init__(self, binary, folder, flags, env=None):
        self.run_dir = os.path.join(folder, "run")
        self.log = open(os.path.join(folder, "serve.log"), "w")
        self.proc = subprocess.Popen([binary, "serve", "--listen", "tcp://127.0.0.1:0", "--log-dir", self.run_dir,
                                      "--log-level", "warn", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        endpoint = os.path.join(self.run_dir, "endpoint")
        deadline = time.time() + 60
        self.address = ""
        while not self.address:
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("bbcluster serve did not start; see " + self.log.name)
            time.sleep(0.05)
            if os.path.exists(endpoint):
                with open(endpoint) as f:
                    self.address = f.read().strip()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def gpu_here():
    return any(n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir("/dev"))


def latency(args, work):
    print(f"== latency: one relu kernel (smoke suite), real runner, 1 {'GPU' if args.gpu else 'CPU'} slot ==")
    folder = os.path.join(work, "latency")
    kernels = os.path.join(folder, "kernels", "relu")
    os.makedirs(kernels)
    with open(os.path.join(kernels, "relu_implementation_v1.py"), "w") as f:
        f.write(RELU)
    server = Server(args.binary, folder, ["--devices", "1"] + [w for kv in args.server_set for w in ("--set", kv)])
    try:
        with Client(server.address, name="latency") as c:
            c.evaluate("relu", RELU, suite="smoke", settings=QUICK_TIMER)  # starts the runner
            served, runner, phases, restarts, after_input, beyond_timer, flags = [], [], {}, 0, [], [], {}
            for _ in range(args.repeats):
                last_input = []
                started = time.perf_counter()
                r = c.evaluate("relu", RELU, suite="smoke", settings=QUICK_TIMER,
                               on_input=lambda _: last_input.append(time.perf_counter()))
                ended = time.perf_counter()
                served.append(ended - started)
                if last_input:
                    after_input.append(ended - last_input[-1])
                runner.append(r.raw.get("wall_seconds", 0.0))
                spent = r.raw.get("phases", {})
                beyond_timer.append(served[-1] - spent.get("time_reference", 0.0) - spent.get("time_kernel", 0.0))
                for name, seconds in r.raw.get("phases", {}).items():
                    phases.setdefault(name, []).append(seconds)
                restarts += 1 if r.raw.get("runner_restarts", 0) else 0
                for flag in r.raw.get("flags", []):
                    flags[flag] = flags.get(flag, 0) + 1
                assert r.correct, r.raw
    finally:
        server.stop()
    fresh = []
    sets = [w for k, v in QUICK_TIMER.items() for w in ("--set", f"{k}={v}")]
    for i in range(args.fresh_repeats):
        started = time.perf_counter()
        done = subprocess.run([args.binary, "--suite", "smoke", "--backend", "directory", "--ops-directory",
                               os.path.dirname(kernels), "--devices", "1", "--log-dir",
                               os.path.join(folder, f"fresh{i}"), "--quiet", *sets],
                              capture_output=True, text=True)
        fresh.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit("the fresh bbcluster command failed: " + done.stderr[-2000:])
    overhead = [s - r for s, r in zip(served, runner)]
    print(f"  warm service, evaluate() to result:   median {statistics.median(served) * 1000:8.1f} ms "
          f"({args.repeats} calls)")
    print(f"  of it, the runner's job:              median {statistics.median(runner) * 1000:8.1f} ms")
    print(f"  the service's overhead beyond it:     median {statistics.median(overhead) * 1000:8.1f} ms")
    print(f"  all beyond the timer's own time:      median {statistics.median(beyond_timer) * 1000:8.1f} ms "
          f"(goal on a GPU: < 100 ms)")
    # Where a served job's time goes (the job's profile phases, each a median over the calls).
    largest = sorted(((statistics.median(v), k) for k, v in phases.items()), reverse=True)[:8]
    print("  the job's largest phases (medians):   " + ", ".join(f"{k} {m * 1000:.1f} ms" for m, k in largest))
    if after_input:
        # The request's end (its reports, scores and answer) after its last input streamed back.
        print(f"  from the last input's record to the answer: median {statistics.median(after_input) * 1000:8.1f} ms")
    print(f"  jobs that found their runner restarted: {restarts} of {args.repeats}")
    print(f"  flags on the results:                 {flags or 'none'}")
    print(f"  fresh bbcluster command:              median {statistics.median(fresh) * 1000:8.1f} ms "
          f"({args.fresh_repeats} runs)")
    print(f"  fresh command / warm service:         {statistics.median(fresh) / statistics.median(served):8.1f}x")
    anchor = os.path.join(HERE, "..", ".anchors", "backendbench", "run.sh")
    if not os.path.exists(anchor):
        print("  fresh BackendBench process:           not measured here (.anchors/backendbench is on the GPU "
              "machine only)")
        return
    # BackendBench's own evaluator on the same kernel folder and suite, a fresh process each time.
    anchor_runs = []
    for i in range(args.fresh_repeats):
        env = dict(os.environ, BB_OUT=os.path.join(folder, f"backendbench{i}"))
        started = time.perf_counter()
        done = subprocess.run(["bash", anchor, "-", "0", "--suite", "smoke", "--backend", "directory",
                               "--ops-directory", os.path.dirname(kernels), "--ops", "relu"],
                              capture_output=True, text=True, env=env)
        anchor_runs.append(time.perf_counter() - started)
        if done.returncode != 0:
            said = done.stdout + done.stderr
            missing = [line for line in said.splitlines() if "ModuleNotFoundError" in line]
            if missing:  # BackendBench's Python here is not the GPU machine's
                print("  fresh BackendBench process:           not measured here: " + missing[-1].strip())
            else:
                print("  fresh BackendBench process:           failed: " + said[-1000:])
            return
    print(f"  fresh BackendBench process:           median {statistics.median(anchor_runs) * 1000:8.1f} ms "
          f"({args.fresh_repeats} runs)")
    print(f"  fresh BackendBench / warm service:    "
          f"{statistics.median(anchor_runs) / statistics.median(served):8.1f}x")


def sim_env(speedup):
    env = dict(os.environ)
    env["BBCLUSTER_SIM_SPEEDUP"] = str(speedup)
    return env


def sim_flags(args, slots):
    return ["--devices", str(slots), "--set", "evaluator.runner=" + os.path.join(os.path.dirname(args.binary),
                                                                                 "sim_runner"),
            "--set", "evaluator.sandbox=off", "--set", "evaluator.device=cuda", "--set",
            f"serve.max_requests={max(64, args.kernels, args.large)}"]


def kernel(n):
    # Each a kernel of its own (its source differs), as an agent's candidates are.
    return RELU + f"# candidate {n}\n"


def flood(address, prefix, clients_n, kernels_n, settings=None):
    """`clients_n` clients each submit `kernels_n` kernels of their own at once; the results and
    the seconds until the last came back."""
    clients = [Client(address, name=f"{prefix}{i}") for i in range(clients_n)]
    started = time.perf_counter()
    futures = [c.submit("relu", kernel(i * kernels_n + k), suite="smoke", settings=settings)
               for k in range(kernels_n) for i, c in enumerate(clients)]
    results = [f.result() for f in concurrent.futures.as_completed(futures)]
    seconds = time.perf_counter() - started
    for c in clients:
        c.close()
    return results, seconds


def throughput(args, work):
    print(f"== throughput: {args.clients} clients x {args.kernels} kernels each, sim_runner slots "
          f"(time x{args.speedup}) ==")
    print(f"  {'slots':>5} {'evaluations':>11} {'seconds':>8} {'per second':>10} {'slot share evaluating':>22}")
    for slots in args.slots:
        folder = os.path.join(work, f"throughput{slots}")
        os.makedirs(folder)
        server = Server(args.binary, folder, sim_flags(args, slots), sim_env(args.speedup))
        try:
            results, seconds = flood(server.address, "c", args.clients, args.kernels)
        finally:
            server.stop()
        busy = [r.raw.get("wall_seconds", 0.0) for r in results]
        n = len(busy)
        share = sum(busy) / (slots * seconds)
        print(f"  {slots:>5} {n:>11} {seconds:>8.2f} {n / seconds:>10.1f} {share:>22.2f}")


def gpu_throughput(args, work):
    clients_n, kernels_n = args.gpu_clients, args.gpu_kernels
    print(f"== throughput on the GPU: {clients_n} clients x {kernels_n} kernels each, the real runner, 1 slot, "
          f"do_bench budgets {GPU_TIMER['timing.gpu_warmup_ms']}/{GPU_TIMER['timing.gpu_rep_ms']} ms ==")
    folder = os.path.join(work, "gpu_throughput")
    os.makedirs(folder)
    server = Server(args.binary, folder, ["--devices", "1", "--set", f"serve.max_requests={max(64, kernels_n)}"])
    try:
        with Client(server.address, name="warm") as c:
            c.evaluate("relu", RELU, suite="smoke", settings=GPU_TIMER)  # starts the runner
        results, seconds = flood(server.address, "g", clients_n, kernels_n, GPU_TIMER)
    finally:
        server.stop()
    busy = [r.raw.get("wall_seconds", 0.0) for r in results]
    correct = sum(bool(r.correct) for r in results)
    n = len(busy)
    print(f"  {n} evaluations ({correct} correct) in {seconds:.2f} s: {n / seconds:.1f} per second, "
          f"slot share evaluating {sum(busy) / seconds:.2f}")


def fairness(args, work):
    print(f"== fairness: one client submits {args.large} kernels, another {args.small} at the same time, "
          f"1 sim_runner slot ==")
    folder = os.path.join(work, "fairness")
    os.makedirs(folder)
    server = Server(args.binary, folder, sim_flags(args, 1), sim_env(args.speedup))
    try:
        with Client(server.address, name="small") as small, Client(server.address, name="large") as large:
            started = time.perf_counter()
            for f in [small.submit("relu", kernel(n), suite="smoke") for n in range(args.small)]:
                f.result()
            idle = time.perf_counter() - started
            queued = [large.submit("relu", kernel(10_000 + n), suite="smoke") for n in range(args.large)]
            time.sleep(1.0)  # the large client's jobs are queued first
            started = time.perf_counter()
            for f in [small.submit("relu", kernel(20_000 + n), suite="smoke") for n in range(args.small)]:
                f.result()
            loaded = time.perf_counter() - started
            left = sum(1 for f in queued if not f.done())
            for f in queued:
                large.cancel(f)
    finally:
        server.stop()
    print(f"  the small client's {args.small} kernels on an idle service:  {idle:7.2f} s")
    print(f"  the same beside the large client's queue:  {loaded:7.2f} s  ({left} of the large client's "
          f"{args.large} still unfinished then)")
    print(f"  loaded / idle: {loaded / idle:.2f} (goal <= 2)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--kernels", type=int, default=50)
    p.add_argument("--slots", default="1,2,4")
    p.add_argument("--large", type=int, default=1000)
    p.add_argument("--small", type=int, default=10)
    p.add_argument("--speedup", type=float, default=10.0,
                   help="sim_runner's time factor: a smoke-suite relu is ~0.2 s of modelled GPU work")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--fresh-repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="fewer clients, kernels and repeats")
    p.add_argument("--keep", action="store_true", help="keep the run folders")
    p.add_argument("--gpu-clients", type=int, default=64, help="clients of the GPU throughput run")
    p.add_argument("--gpu-kernels", type=int, default=50, help="kernels per client of the GPU throughput run")
    p.add_argument("--server-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the latency part's server (repeatable), e.g. evaluator.jit_cache=false")
    p.add_argument("--only", default="", help="comma-separated parts to run: latency,gpu,throughput,fairness")
    args = p.parse_args()
    args.gpu = gpu_here()
    if args.quick:
        args.clients, args.kernels, args.large, args.repeats, args.fresh_repeats = 8, 10, 100, 5, 1
        args.gpu_clients, args.gpu_kernels = 8, 10
    args.binary = os.path.join(args.bin, "bbcluster")
    args.slots = [int(s) for s in args.slots.split(",")]
    work = tempfile.mkdtemp(prefix="bench-serve-")
    try:
        parts = set(args.only.split(",")) if args.only else {"latency", "gpu", "throughput", "fairness"}
        if "latency" in parts:
            latency(args, work)
        if "gpu" in parts:
            if args.gpu:
                gpu_throughput(args, work)
            else:
                print("== throughput on the GPU: not measured here (no GPU) ==")
        if "throughput" in parts:
            throughput(args, work)
        if "fairness" in parts:
            fairness(args, work)
    finally:
        if args.keep:
            print("run folders in " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
