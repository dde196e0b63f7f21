"""A stand-in for KernelAgent's triton_kernel_agent package, for bbcluster's tests.

It behaves as the real TritonKernelAgent does where bbcluster depends on it:

- TritonKernelAgent(num_workers, max_rounds, log_dir, model_name, preferred_provider, ...):
  the model is model_name, else $OPENAI_MODEL, else claude-sonnet-4-20250514; its provider
  comes from utils.providers.get_model_provider, and when there is none the agent is made all
  the same, with provider None and the reason in `_provider_error`.
- Its logging: logging.basicConfig with a FileHandler on <log_dir>/agent_<second>.log (so
  agents started in the same second in one log_dir share it), then the worker manager's
  basicConfig with manager_<second>.log, which stays empty.
- generate_kernel(problem_description, test_code=None, generate_default_test=True): with
  generate_default_test (or no test code) it first asks the model for its own test, from a
  prompt holding the problem description (and the given test as a reference); without a
  provider that raises RuntimeError("Unable to generate test code: no LLM provider available
  and mock fallback disabled"). Its kernel and refinement prompts hold the tests only: the
  first, then each further one marked as an additional validation test. The problem
  description reaches no prompt but the test's. A kernel is accepted when every test passes.
- The session folder <log_dir>/session_<date>_<time>_<microseconds>/ holds problem.txt, the
  tests, and workers/worker_<N>/round_<M>.json per round ({"round", "timestamp", "success",
  "kernel_code", "stdout", "stderr"}). The result: {"success": True, "kernel_code",
  "worker_id", "rounds", "session_dir"} or {"success": False, "message": "Failed to generate
  working kernel", "session_dir"}.

What it does for an operator (found in the problem's "Operator: aten.X.Y" line) is scripted
by the JSON file named in $FAKE_AGENT_SCRIPT: {"aten.relu.default": ["success"], ...}, one
behaviour per call in turn (the last repeats; the count is kept beside the script); without a
script, or for an operator the script does not name, it is "success". Behaviours:
  model     the real loop: kernel seeds from the model (one per worker), each tested and
            refined by the model for up to max_rounds rounds
  success   a correct kernel written here, checked with the tests, in a session folder
  wrong     a kernel that is wrong yet claimed correct (the benchmark must catch it)
  fail      no kernel: worker 0's one round tests a wrong kernel, and the result says
            "Failed to generate working kernel"
  crash     the process aborts
  hang      the call never returns (after starting a worker process that sleeps, as the
            real agent's workers are processes)
  raise     generate_kernel raises
Every behaviour but model writes its kernel here; the agent's own test (generate_default_test)
is asked of the model for all of them.
"""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from utils.providers import get_model_provider

DEFAULT_MODEL = "claude-sonnet-4-20250514"

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


def _extract_code(text):
    found = re.search(r"```(?:python|py)?[ \t]*\n(.*?)```", text or "", re.S)
    return found.group(1).strip() + "\n" if found else None


def _test_generation_prompt(problem_description, provided_test):
    prompt = ("Write a test for a Triton kernel from this problem description:\n\n"
              f"{problem_description}\n\n")
    if provided_test:
        prompt += f"The user gave this test as a reference:\n\n```python\n{provided_test}\n```\n\n"
    return prompt + ("The test imports kernel_function from kernel, checks it, and exits 0 "
                     "when it passes. Answer with the test in one ```python block.\n")


def _tests_text(tests):
    text = tests[0]
    for i, extra in enumerate(tests[1:], 1):
        text += (f"\n\n# === ADDITIONAL VALIDATION TEST {i} (for reference only; do not copy it "
                 f"into the kernel) ===\n{extra}")
    return text


def _kernel_prompt(tests):
    return ("Write a Triton kernel, wrapped in a function kernel_function, that passes this test."
            f"\n\nTEST CODE:\n```python\n{_tests_text(tests)}\n```\n\n"
            "Answer with the complete kernel.py in one ```python block.\n")


def _refinement_prompt(tests, kernel, stdout, stderr):
    return ("Fix this Triton kernel so that it passes the test.\n\n"
            f"TEST CODE:\n```python\n{_tests_text(tests)}\n```\n\n"
            f"CURRENT KERNEL IMPLEMENTATION:\n```python\n{kernel}\n```\n\n"
            f"TEST RESULTS:\nError output: {stderr or 'None'}\nStandard output: {stdout or 'None'}\n\n"
            "Answer with the complete fixed kernel.py in one ```python block.\n")


class TritonKernelAgent:
    def __init__(self, num_workers=None, max_rounds=None, log_dir=None, model_name=None,
                 high_reasoning_effort=True, preferred_provider=None, **kwargs):
        self.num_workers = num_workers or int(os.getenv("NUM_KERNEL_SEEDS", "4"))
        self.max_rounds = max_rounds or int(os.getenv("MAX_REFINEMENT_ROUNDS", "10"))
        self.model_name = model_name or os.getenv("OPENAI_MODEL", DEFAULT_MODEL)
        self.provider = None
        try:
            self.provider = get_model_provider(self.model_name, preferred_provider)
        except ValueError as e:
            self._provider_error = str(e)
        self.log_dir = Path(log_dir) if log_dir else Path.cwd() / "triton_kernel_logs"
        self.log_dir.mkdir(exist_ok=True, parents=True)
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s - %(name)s - %(levelname)s - %(message)s",
                            handlers=[logging.FileHandler(self.log_dir / f"agent_{stamp}.log"),
                                      logging.StreamHandler()])
        self.logger = logging.getLogger("TritonKernelAgent")
        # The worker manager's own basicConfig: a no-op after the one above, but its file is
        # opened all the same.
        logging.basicConfig(level=logging.INFO,
                            handlers=[logging.FileHandler(self.log_dir / f"manager_{stamp}.log"),
                                      logging.StreamHandler()])

    def _behaviour(self, op):
        script_path = os.environ.get("FAKE_AGENT_SCRIPT")
        if not script_path:
            return "success", 1
        with open(script_path) as f:
            script = json.load(f)
        count_file = f"{script_path}.{op}.count"
        calls = int(open(count_file).read()) if os.path.exists(count_file) else 0
        with open(count_file, "w") as f:
            f.write(str(calls + 1))
        steps = script.get(op) or ["success"]
        return steps[min(calls, len(steps) - 1)], calls + 1

    def _ask(self, prompt):
        if not self.provider:
            raise RuntimeError(f"No provider available for model {self.model_name}")
        return self.provider.get_response(self.model_name, [{"role": "user", "content": prompt}],
                                          max_tokens=20000).content

    def _seeds(self, tests):
        if not self.provider:
            raise RuntimeError(f"No provider available for model {self.model_name}")
        messages = [{"role": "user", "content": _kernel_prompt(tests)}]
        replies = self.provider.get_multiple_responses(self.model_name, messages,
                                                       n=self.num_workers)
        kernels = [k for k in (_extract_code(r.content) for r in replies) if k]
        if not kernels:
            raise ValueError("No valid kernel code found in any LLM response")
        return kernels

    def _run_tests(self, kernel, tests, workdir):
        (workdir / "kernel.py").write_text(kernel)
        stdout, stderr, passed = "", "", True
        for i, test in enumerate(tests):
            name = "test_kernel.py" if i == 0 else f"test_kernel_{i}.py"
            (workdir / name).write_text(test)
            run = subprocess.run([sys.executable, name], cwd=workdir, capture_output=True,
                                 text=True, timeout=600)
            stdout += run.stdout
            stderr += run.stderr if run.returncode == 0 else \
                run.stderr + f"Test exited with code {run.returncode}\n"
            passed = passed and run.returncode == 0
        return passed, stdout, stderr

    def _log_round(self, session, worker, number, success, kernel, stdout, stderr):
        folder = session / "workers" / f"worker_{worker}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"round_{number}.json", "w") as f:
            json.dump({"round": number, "timestamp": datetime.now().isoformat(),
                       "success": success, "kernel_code": kernel, "stdout": stdout,
                       "stderr": stderr}, f, indent=2)

    def _verify(self, session, seeds, tests, refine):
        """Workers in turn: each tests its seed and, with `refine`, has the model fix it,
        for up to max_rounds rounds."""
        for worker, kernel in enumerate(seeds):
            workdir = Path(tempfile.mkdtemp(prefix=f"worker_{worker}_"))
            try:
                # Kernels written here are not refined: one round tells all.
                for number in range(1, (self.max_rounds if refine else 1) + 1):
                    passed, stdout, stderr = self._run_tests(kernel, tests, workdir)
                    self._log_round(session, worker, number, passed, kernel, stdout, stderr)
                    if passed:
                        return {"worker_id": worker, "rounds": number, "kernel_code": kernel}
                    if not refine:
                        continue
                    fixed = _extract_code(self._ask(
                        _refinement_prompt(tests, kernel, stdout, stderr)))
                    kernel = fixed or kernel
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return None

    def generate_kernel(self, problem_description, test_code=None, generate_default_test=True):
        found = re.search(r"^Operator: (\S+)", problem_description, re.M)
        op = found.group(1) if found else "unknown"
        behaviour, call = self._behaviour(op)
        print(f"fake agent: {op} call {call}: {behaviour} "
              f"({self.num_workers} workers, {self.max_rounds} rounds, model {self.model_name})",
              flush=True)
        self.logger.info("Starting kernel generation for %s", op)
        if behaviour == "crash":
            os.abort()
        if behaviour == "hang":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                              str(self.log_dir)])
            while True:
                time.sleep(60)
        if behaviour == "raise":
            raise RuntimeError("the model's API refused the request")

        tests = []
        if generate_default_test or not test_code:
            if not self.provider:
                raise RuntimeError("Unable to generate test code: no LLM provider available "
                                   "and mock fallback disabled")
            own = _extract_code(self._ask(_test_generation_prompt(problem_description,
                                                                  test_code)))
            if not own:
                raise ValueError("No valid code found in LLM response")
            tests.append(own)
        if test_code:
            tests.append(test_code)

        now = time.time()
        session = self.log_dir / (f"session_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
                                  f"_{int(now * 1e6) % 1000000}")
        session.mkdir()
        (session / "problem.txt").write_text(problem_description)
        (session / "test.py").write_text(_tests_text(tests))

        base = op.split(".")[1] if op.count(".") >= 2 else op
        if behaviour == "model":
            seeds = self._seeds(tests)
        elif behaviour in ("wrong", "fail"):
            seeds = ["import torch\n\n\n" + WRONG]
        else:
            body = KERNELS.get(base)
            if base == "relu" and _triton_on_gpu():
                body = TRITON_RELU
            if body is None:
                body = ("def kernel_function(*args, **kwargs):\n"
                        f"    return torch.ops.aten.{base}.{op.split('.')[-1]}(*args, **kwargs)\n")
            seeds = ["import torch\n\n\n" + body]
        found = self._verify(session, seeds, tests, refine=behaviour == "model")
        if behaviour == "wrong":  # claimed correct all the same
            found = {"worker_id": 0, "rounds": 1, "kernel_code": seeds[0]}
        if not found:
            self.logger.warning("No worker found a successful solution")
            return {"success": False, "message": "Failed to generate working kernel",
                    "session_dir": str(session)}
        (session / "final_kernel.py").write_text(found["kernel_code"])
        return {"success": True, "kernel_code": found["kernel_code"],
                "worker_id": found["worker_id"], "rounds": found["rounds"],
                "session_dir": str(session)}
