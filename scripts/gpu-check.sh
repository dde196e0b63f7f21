#!/usr/bin/env bash
# On a machine with a GPU and a Python that has torch (a GPU cluster node): builds bbcluster
# against that Python's libtorch and runs what needs the GPU: the [gpu] tests, the timing
# fidelity and compile benchmarks, and a short torchbench sweep on one GPU. Everything it
# prints also goes to files in OUT_DIR.
#
#   scripts/gpu-check.sh OUT_DIR [TRACES_DIR]
#
# BBCLUSTER_PYTHON picks the Python (default: python3 on PATH); TRACES_DIR holds the operator
# traces (default: data/traces of the checkout). GPU_CHECK_STEPS picks the steps after
# the build (default: all of tests,timing,compile,sweep,campaign,sweepbench; sweepbench-quick
# runs the sweep benchmark without its --topn 20 run; checks runs the exploit checks' cost,
# the included set with them off and on; exploits runs the exploit corpus and the runner's
# [gpu] tests alone; full runs every included input with the adaptive timer, stopped after
# 420 s; graphs times every operator's smallest input with --timer cudagraph and do_bench;
# serve runs bench/serve.py's latency and GPU throughput parts, and prints any fatal-signal
# line of the served runners; jit runs bench/jit_cache.py with FlagGems, cold and warm).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:?usage: gpu-check.sh OUT_DIR [TRACES_DIR]}" && cd "$1" && pwd)
traces=${2:-$here/data/traces}
export BBCLUSTER_SKIP_PACKAGES=1
export BBCLUSTER_PYTHON=${BBCLUSTER_PYTHON:-$(command -v python3)}
export BBCLUSTER_BUILD_DIR=${BBCLUSTER_BUILD_DIR:-$here/build-gpu}
export BBCLUSTER_CMAKE_ARGS="-DTORCH_CUDA_ARCH_LIST=9.0 -DBBCLUSTER_TRACES_DIR=$traces ${BBCLUSTER_CMAKE_ARGS:-}"
build=$BBCLUSTER_BUILD_DIR
steps=${GPU_CHECK_STEPS:-tests,timing,compile,sweep,campaign,sweepbench}
want() { [[ ",$steps," == *",$1,"* ]]; }
step() { echo "== $1 ($(date +%T))" | tee -a "$out/steps.txt"; }

step "build"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
start=$(date +%s)
"$here/scripts/setup.sh" --all > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build took $(( $(date +%s) - start )) s" | tee -a "$out/steps.txt"

if want tests; then
step "[gpu] tests"
timeout 300 "$build/tests/bb_actor_tests" "[gpu]" 2>&1 | tee "$out/gpu_actor_tests.txt" | tail -15
timeout 300 "$build/tests/bb_integration_tests" "[gpu]" 2>&1 | tee "$out/gpu_integration_tests.txt" | tail -15
# On a one-GPU machine, root gives GPU 0 a second node, /dev/nvidia1, for the one sandbox test
# that a runner on slot 0 cannot open another GPU's node, and removes it straight after: while
# it exists the machine counts two GPUs, and a sweep's second slot would find none.
if [ ! -e /dev/nvidia1 ] && [ -e /dev/nvidia0 ] && [ "$(id -u)" = 0 ] \
   && mknod /dev/nvidia1 c "$((0x$(stat -c %t /dev/nvidia0)))" "$((0x$(stat -c %T /dev/nvidia0)))" 2>/dev/null; then
  timeout 120 "$build/tests/bb_integration_tests" "a sandboxed runner on GPU slot 0*" 2>&1 \
    | tee "$out/gpu_slot_isolation.txt" | tail -5
  rm -f /dev/nvidia1
fi
fi

if want exploits; then
step "exploit corpus and the runner's [gpu] tests"
timeout 300 "$build/tests/bb_integration_tests" "the exploit corpus on the GPU" 2>&1 | tee "$out/exploits_gpu.txt" | tail -25
timeout 300 "$build/tests/bb_runner_tests" 2>&1 | tee "$out/runner_tests.txt" | tail -15
fi

if want timing; then
step "timing fidelity"
timeout 240 "$build/bench/bench_timing" "$traces/hf_train" 2 2>&1 | tee "$out/bench_timing.txt" | tail -30
fi

if want compile; then
step "compile benchmark"
timeout 200 "$build/bench/bench_compile" sm_90 2>&1 | tee "$out/bench_compile.txt"
fi

if want sweep; then
step "one-GPU sweep (aten, hf_train, topn 1)"
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$out/gpu_util.txt" 2>&1 &
sampler=$!
start=$(date +%s.%N)
timeout 240 "$build/bin/bbcluster" --suite torchbench --data "$traces/hf_train" --topn 1 \
  --log-dir "$out/sweep" > "$out/sweep.txt" 2> "$out/sweep.err"
end=$(date +%s.%N)
kill $sampler 2>/dev/null
awk -v a="$start" -v b="$end" 'BEGIN { printf "sweep wall time: %.1f s\n", b - a }' | tee -a "$out/sweep.txt"
awk '{ s += $1; n += 1; if ($1 > 0) busy += 1 } END { if (n) printf "GPU busy share: %.1f%% of %d samples, mean utilization %.1f%%\n", 100 * busy / n, n, s / n }' \
  "$out/gpu_util.txt" | tee -a "$out/sweep.txt"
cat "$out/sweep.txt"
fi

if want campaign; then
step "kernel_agent campaign (stand-in agent writing a Triton relu) and its re-evaluation"
export PYTHONPATH="$here/tests/kernel_agent${PYTHONPATH:+:$PYTHONPATH}"
timeout 300 "$build/bin/bbcluster" --suite torchbench --data "$traces/hf_train" --backend kernel_agent \
  --ops relu.default,leaky_relu.default --topn 5 --log-dir "$out/campaign" 2>&1 | tee "$out/campaign.txt" | tail -6
campaign=$(ls -d "$out"/campaign/kernel_agent_run_* 2>/dev/null | head -1)
find "$campaign" | sort > "$out/campaign_tree.txt"
timeout 200 "$build/bin/bbcluster" --suite torchbench --data "$traces/hf_train" --backend directory \
  --ops-directory "$campaign" --topn 5 --log-dir "$out/reevaluate" 2>&1 | tee "$out/reevaluate.txt" | tail -4
timeout 300 "$build/tests/bb_integration_tests" "*kernel_agent*" 2>&1 | tee "$out/kernel_agent_tests.txt" | tail -6
fi
if want sweepbench || want sweepbench-quick; then
step "sweep benchmark (included set, aten: topn 1 cold and warm, topn 5, adaptive)"
quick=""; want sweepbench-quick && quick="--quick"
timeout 560 "$build/bench/bench_sweep" $quick --data "$traces/backendbench/backend_bench_problems_included.txt" \
  --keep "${TMPDIR:-/tmp}/bench_sweep" 2>&1 | tee "$out/bench_sweep.txt" | tail -40
fi
if want full; then
step "the whole set (every included input, adaptive timer, one GPU)"
timeout 590 "$build/bench/bench_sweep" --full --limit 420 --data "$traces/backendbench/backend_bench_problems_included.txt" \
  --keep "${TMPDIR:-/tmp}/bench_full" 2>&1 | tee "$out/bench_full.txt" | tail -30
fi
if want graphs; then
step "kernel-only timing: --timer cudagraph against do_bench on every operator's smallest input"
timeout 560 "$build/bench/bench_sweep" --graphs --data "$traces/backendbench/backend_bench_problems_included.txt" \
  --keep "${TMPDIR:-/tmp}/bench_graphs" 2>&1 | tee "$out/bench_graphs.txt" | tail -20
fi
if want checks; then
step "the exploit checks' cost (included set, aten, topn 1: off, on, on, off)"
timeout 560 "$build/bench/bench_sweep" --checks --data "$traces/backendbench/backend_bench_problems_included.txt" \
  --keep "${TMPDIR:-/tmp}/bench_checks" 2>&1 | tee "$out/bench_checks.txt" | tail -20
fi
if want serve; then
step "the service: latency of one relu input and many clients' kernels on the GPU"
if "$BBCLUSTER_PYTHON" -c "import zmq, msgpack" 2>/dev/null; then
  mkdir -p "$out/serve"
  TMPDIR="$out/serve" timeout 400 "$BBCLUSTER_PYTHON" "$here/bench/serve.py" --bin "$build/bin" \
    --only latency,gpu --keep 2>&1 | tee "$out/bench_serve.txt" | tail -30
  # A served runner that crashed says where in its log (bbrunner's fatal-signal line).
  find "$out/serve" -name "runner_*.log" -exec grep -h "bbrunner:" {} + 2>/dev/null | sort | uniq -c | head -10
else
  echo "not run: the Python client needs pyzmq and msgpack in $BBCLUSTER_PYTHON"
fi
fi
if want jit; then
step "the JIT cache: FlagGems over the included set, cold and warm"
timeout 560 "$BBCLUSTER_PYTHON" "$here/bench/jit_cache.py" --bin "$build/bin" --flag-gems --no-off \
  --data "$traces/backendbench/backend_bench_problems_included.txt" 2>&1 | tee "$out/bench_jit.txt" | tail -20
fi
step "done"
