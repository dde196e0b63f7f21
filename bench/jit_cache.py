#!/usr/bin/env python3
"""The JIT cache benchmark: the same sweep three times, side by side in one run.

1. the JIT cache off (evaluator.jit_cache = false): every run compiles, as before the cache;
2. the cache on and empty (a fresh $BBCLUSTER_HOME): the first run on a machine;
3. the cache on again, filled by run 2: every later run, runner and sweep on the machine.

Each prints its wall time, the kernels' first calls (the profile's first_kernel_call: where
Triton and TorchInductor compile), the scores, and what the cache holds; then warm over cold.
The reference-time cache is off in all three, so that only the JIT cache differs.

Default (any machine): a relu written with torch.compile (TorchInductor, a C++ kernel on a CPU,
Triton on a GPU), BackendBench's smoke suite. --flag-gems (a GPU with FlagGems): FlagGems over
BackendBench's included set at --topn 1 (goal: the second run at most 0.35x the first).

Usage: bench/jit_cache.py [--bin build/bin] [--flag-gems [--ops A,B]] [--data TRACE] [--topn N] [--no-off]
                          [--keep]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

COMPILED_RELU = """import torch


@torch.compile(dynamic=False)
def _relu(x):
    return torch.clamp(x, min=0)


def relu_kernel_impl(x):
    return _relu(x)
"""


def sweep(args, work, name, home, extra):
    folder = os.path.join(work, name)
    env = dict(os.environ, BBCLUSTER_HOME=home)
    if args.flag_gems:
        what = ["--suite", "torchbench", "--data", args.data, "--topn", str(args.topn), "--backend", "flag_gems"]
        if args.ops:
            what += ["--ops", args.ops]
    else:
        what = ["--suite", "smoke", "--backend", "directory", "--ops-directory", os.path.join(work, "kernels")]
    started = time.perf_counter()
    done = subprocess.run([args.binary, *what, "--no-reference-cache", "--log-dir", folder, *extra],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: bbcluster failed ({done.returncode}): {done.stderr[-2000:]}")
    with open(os.path.join(folder, "profile.json")) as f:
        phases = json.load(f)["total_seconds"]
    scores = [line for line in done.stdout.splitlines() if "score" in line]
    # Each operator's first calls and loading, from its records (the last attempt's).
    per_op = {}
    with open(os.path.join(folder, "results.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "op_name" in record and "phases" in record:
                per_op[record["op_name"]] = record["phases"]
    return {"name": name, "wall": wall, "first": phases.get("first_kernel_call", 0.0), "scores": scores,
            "load": phases.get("load_kernel", 0.0), "per_op": per_op}


def slowest_first_calls(cold, warm, n=10):
    """The operators whose first calls the warm run still spends most on, beside the cold run's."""
    ops = sorted(warm["per_op"], key=lambda op: -warm["per_op"][op].get("first_kernel_call", 0.0))[:n]
    print(f"  the {len(ops)} operators with the longest first calls warm (s: warm / cold; loading warm / cold):")
    for op in ops:
        w, c = warm["per_op"][op], cold["per_op"].get(op, {})
        print(f"    {op:<48} {w.get('first_kernel_call', 0.0):6.2f} / {c.get('first_kernel_call', 0.0):6.2f}"
              f"   {w.get('load_kernel', 0.0):5.2f} / {c.get('load_kernel', 0.0):5.2f}")


def held(home):
    files, size = 0, 0
    for root, _, names in os.walk(os.path.join(home, "jit")):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(root, n))
    return files, size


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--flag-gems", action="store_true", help="FlagGems over the included set (GPU)")
    p.add_argument("--data", default=os.path.join(HERE, "..", "data", "traces", "backendbench",
                                                  "backend_bench_problems_included.txt"))
    p.add_argument("--topn", type=int, default=1)
    p.add_argument("--ops", default="", help="with --flag-gems: only these operators (as --ops)")
    p.add_argument("--no-off", action="store_true", help="leave out the run with the cache off")
    p.add_argument("--keep", action="store_true", help="keep the run folders")
    args = p.parse_args()
    args.binary = os.path.join(args.bin, "bbcluster")
    work = tempfile.mkdtemp(prefix="bench-jit-")
    try:
        os.makedirs(os.path.join(work, "kernels", "relu"))
        with open(os.path.join(work, "kernels", "relu", "relu_implementation_v1.py"), "w") as f:
            f.write(COMPILED_RELU)
        what = (f"FlagGems, included set{' (' + args.ops + ')' if args.ops else ''}, topn {args.topn}"
                if args.flag_gems else "a torch.compile relu, smoke suite")
        print(f"== the JIT cache: {what} ==")
        home = os.path.join(work, "home")
        runs = [] if args.no_off else [sweep(args, work, "off", os.path.join(work, "home_off"),
                                             ["--set", "evaluator.jit_cache=false"])]
        for name in ("cold", "warm"):
            runs.append(sweep(args, work, name, home, []))
            print(f"  {name}: {runs[-1]['wall']:.1f} s", flush=True)
        for r in runs:
            print(f"  {r['name']:>5}: wall {r['wall']:7.1f} s, kernels' first calls {r['first']:7.1f} s, "
                  f"loading {r['load']:6.1f} s")
            for line in r["scores"][:2]:
                print(f"         {line}")
        files, size = held(home)
        print(f"  the cache holds {files} files, {size / 2**20:.1f} MiB")
        cold, warm = runs[-2:]
        slowest_first_calls(cold, warm)
        print(f"  warm / cold: wall {warm['wall'] / cold['wall']:.2f}"
              f"{' (goal <= 0.35)' if args.flag_gems else ''}, first calls "
              f"{warm['first'] / cold['first'] if cold['first'] else 0:.2f}"
              + (f"; cold / off: wall {cold['wall'] / runs[0]['wall']:.2f}" if len(runs) == 3 else ""))
    finally:
        if args.keep:
            print("run folders in " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
