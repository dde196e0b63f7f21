#!/usr/bin/env python3
"""bbcluster's adapter to KernelAgent (the Python package triton_kernel_agent).

bbcluster runs one adapter process per operator and version, so that an agent that crashes
or hangs takes down this process only:

    python bbcluster_kernel_agent.py --check
        exit 0 when triton_kernel_agent can be imported, else 3 with how to install it
    python bbcluster_kernel_agent.py REQUEST.json RESULT.json
        runs TritonKernelAgent(log_dir, num_workers, max_rounds).generate_kernel(
        problem_description, test_code) and writes its result as JSON

REQUEST.json: {"problem_description", "test_code", "log_dir", "num_workers", "max_rounds"}.
RESULT.json: {"success", "kernel_code", "session_dir", "worker_id", "rounds", "message"}, or
{"error": "missing_package" | "exception", "message", "traceback"}. It is written whole
(through a temporary file) before the process exits; what the agent prints goes to stdout
and stderr, which bbcluster keeps in agent_logs/.
"""

import json
import os
import signal
import sys
import traceback

INSTALL_HINT = (
    "KernelAgent's Python package triton_kernel_agent is not importable by {python}: {error}. "
    "Install it into that Python (for instance `{python} -m pip install "
    "git+https://github.com/meta-pytorch/KernelAgent`, or `pip install -e .` in a KernelAgent "
    "checkout), or name a Python that has it with --kernel-agent-python or "
    "[kernel_agent] python in the settings file."
)


def write_result(path, result):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


def import_agent():
    try:
        from triton_kernel_agent import TritonKernelAgent
    except ImportError as e:
        return None, INSTALL_HINT.format(python=sys.executable, error=e)
    return TritonKernelAgent, ""


def end_group(signum, frame):
    """bbcluster ended (it was killed, or the agent timed out): so do the agent's workers.
    bbcluster starts this process as the leader of its own process group."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(128 + signum)


def main(argv):
    signal.signal(signal.SIGTERM, end_group)
    if len(argv) == 2 and argv[1] == "--check":
        agent_class, why = import_agent()
        if agent_class is None:
            print(why, file=sys.stderr)
            return 3
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        request = json.load(f)
    result_path = argv[2]
    agent_class, why = import_agent()
    if agent_class is None:
        write_result(result_path, {"error": "missing_package", "message": why})
        return 3
    try:
        agent = agent_class(
            log_dir=request["log_dir"],
            num_workers=int(request["num_workers"]),
            max_rounds=int(request["max_rounds"]),
        )
        result = agent.generate_kernel(
            problem_description=request["problem_description"],
            test_code=request["test_code"],
        )
    except Exception as e:  # the agent's own failure: reported, and retried by bbcluster
        write_result(result_path, {"error": "exception", "message": f"{type(e).__name__}: {e}",
                                   "traceback": traceback.format_exc()})
        return 4
    result = dict(result or {})
    write_result(result_path, {
        "success": bool(result.get("success", False)),
        "kernel_code": result.get("kernel_code") or "",
        "session_dir": str(result.get("session_dir") or ""),
        "worker_id": result.get("worker_id"),
        "rounds": result.get("rounds"),
        "message": str(result.get("message") or ""),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
