"""A stand-in for KernelAgent's triton_kernel_agent package, for bbcluster's tests.

Same API as the real one: TritonKernelAgent(log_dir=..., num_workers=..., max_rounds=...) and
generate_kernel(problem_description=..., test_code=...) returning a dict with success,
kernel_code, session_dir, worker_id, rounds and message. It writes a plain PyTorch kernel
instead of asking a model, and, like the real agent, accepts it only when the test code it was
given passes with it: so the tests also check the test code bbcluster writes.

What it does for an operator (found in the problem's "Operator: aten.X.Y" line) is scripted
by the JSON file named in $FAKE_AGENT_SCRIPT: {"aten.relu.default": ["success"], ...}, one
behaviour per call in turn (the last repeats); without a script, or for an operator the script
does not name, it is "success". Behaviours:
  success   a correct kernel, checked with the test code, in a session folder
  wrong     a kernel that is wrong yet claimed correct (the benchmark must catch it)
  fail      no kernel: success False with a message
  crash     the process aborts
  hang      the call never returns (after starting a worker process that sleeps, as the
            real agent's workers are processes)
  raise     generate_kernel raises
"""

import json
import os
import re
import subprocess
import sys
import time

KERNELS = {
    "relu": "def kernel_function(x):\n    return torch.clamp(x, min=0)\n",
    "leaky_relu": ("def kernel_function(x, negative_slope=0.01):\n"
                   "    return torch.where(x > 0, x, x * negative_slope)\n"),
    "tanh": "def kernel_function(x):\n    return torch.tanh(x)\n",
}
WRONG = "def kernel_function(x, *args, **kwargs):\n    return x * 0.5\n"

# On a machine with a GPU and Triton, relu is a Triton kernel, as the real agent writes.
TRITON_RELU = """import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


def kernel_function(x):
    if not x.is_cuda:
        return torch.clamp(x, min=0)
    src = x.contiguous()
    out = torch.empty_like(src)
    n = src.numel()
    if n:
        _relu[(triton.cdiv(n, 1024),)](src, out, n, BLOCK=1024)
    return out
"""


def _triton_on_gpu():
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


class TritonKernelAgent:
    def __init__(self, log_dir=None, num_workers=4, max_rounds=10, **kwargs):
        self.log_dir = log_dir or "agent_logs"
        self.num_workers = num_workers
        self.max_rounds = max_rounds
        os.makedirs(self.log_dir, exist_ok=True)

    def _behaviour(self, op):
        count_file = os.path.join(self.log_dir, f".fake_agent_{op}.count")
        calls = int(open(count_file).read()) if os.path.exists(count_file) else 0
        with open(count_file, "w") as f:
            f.write(str(calls + 1))
        script = {}
        if os.environ.get("FAKE_AGENT_SCRIPT"):
            with open(os.environ["FAKE_AGENT_SCRIPT"]) as f:
                script = json.load(f)
        steps = script.get(op) or ["success"]
        return steps[min(calls, len(steps) - 1)], calls + 1

    def generate_kernel(self, problem_description, test_code=None):
        found = re.search(r"^Operator: (\S+)", problem_description, re.M)
        op = found.group(1) if found else "unknown"
        behaviour, call = self._behaviour(op)
        print(f"fake agent: {op} call {call}: {behaviour} "
              f"({self.num_workers} workers, {self.max_rounds} rounds)", flush=True)
        if behaviour == "crash":
            os.abort()
        if behaviour == "hang":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", self.log_dir])
            while True:
                time.sleep(60)
        if behaviour == "raise":
            raise RuntimeError("the model's API refused the request")
        # Named as KernelAgent names its sessions: session_<date>_<time>_<microseconds>.
        now = time.time()
        session = os.path.join(self.log_dir, "session_" + time.strftime("%Y%m%d_%H%M%S", time.localtime(now))
                               + f"_{int(now * 1e6) % 1000000:06d}")
        os.makedirs(os.path.join(session, "worker_0"))
        with open(os.path.join(session, "problem.txt"), "w") as f:
            f.write(problem_description)
        if behaviour == "fail":
            return {"success": False, "session_dir": session,
                    "message": f"no worker found a kernel in {self.max_rounds} rounds"}
        base = op.split(".")[1] if op.count(".") >= 2 else op
        body = WRONG if behaviour == "wrong" else KERNELS.get(base)
        if behaviour == "success" and base == "relu" and _triton_on_gpu():
            body = TRITON_RELU
        if body is None:
            body = ("def kernel_function(*args, **kwargs):\n"
                    f"    return torch.ops.aten.{base}.{op.split('.')[-1]}(*args, **kwargs)\n")
        code = "import torch\n\n\n" + body
        with open(os.path.join(session, "kernel.py"), "w") as f:
            f.write(code)
        if test_code:
            with open(os.path.join(session, "test_kernel.py"), "w") as f:
                f.write(test_code)
            test = subprocess.run([sys.executable, "test_kernel.py"], cwd=session,
                                  capture_output=True, text=True, timeout=600)
            with open(os.path.join(session, "worker_0", "round_1.log"), "w") as f:
                f.write(test.stdout + test.stderr)
            if test.returncode != 0 and behaviour != "wrong":
                return {"success": False, "kernel_code": None, "session_dir": session,
                        "worker_id": 0, "rounds": 1,
                        "message": "the test code failed: " + (test.stdout + test.stderr)[-500:]}
        return {"success": True, "kernel_code": code, "session_dir": session, "worker_id": 0,
                "rounds": 1, "message": "kernel passed the tests"}
