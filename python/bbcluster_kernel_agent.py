#!/usr/bin/env python3
"""bbcluster's adapter to KernelAgent (the Python package triton_kernel_agent).

bbcluster runs one adapter process per operator and version, so that an agent that crashes
or hangs takes down this process only:

    python bbcluster_kernel_agent.py --check [SETTINGS.json]
        exit 0 when triton_kernel_agent can be imported and, with SETTINGS.json, when the agent
        built from those settings has a provider for its model (stdout: a line
        "bbcluster-provider\\tMODEL\\tPROVIDER\\tURL");
        3 when the package is missing, 5 when the agent has no provider (the agent's own
        reason on stderr, last line)
    python bbcluster_kernel_agent.py REQUEST.json RESULT.json
        runs TritonKernelAgent(...).generate_kernel(problem_description, test_code) and writes
        its result as JSON

SETTINGS.json and REQUEST.json carry the agent's settings: "model" (KernelAgent's model_name;
"" leaves it to $OPENAI_MODEL), "provider" ("relay", "openai", "anthropic" or "": the model's
own providers in KernelAgent's order), "base_url" (the chosen provider's server: LLM_RELAY_URL,
OPENAI_BASE_URL or ANTHROPIC_BASE_URL; all three when no provider is named), "num_workers",
"max_rounds", "generate_default_test". API keys are never in these files: KernelAgent reads
them from the environment. REQUEST.json adds "problem_description", "test_code" and "log_dir",
the folder of this one run (the agent's own log files and its session go there, so that no
two runs share a log).

RESULT.json: {"success", "kernel_code", "session_dir", "worker_id", "rounds", "message"}, or
{"error": "missing_package" | "configuration" | "exception", "message", "traceback"}; a
configuration error (no provider for the model, an unknown provider name) is final, an
exception is worth another run. It is written whole (through a temporary file) before the
process exits; what the agent logs goes to stderr, which bbcluster keeps in agent_logs/.
"""

import glob
import inspect
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import traceback

INSTALL_HINT = (
    "KernelAgent's Python package triton_kernel_agent is not importable by {python}: {error}. "
    "Install it into that Python (for instance `{python} -m pip install "
    "git+https://github.com/meta-pytorch/KernelAgent`, or `pip install -e .` in a KernelAgent "
    "checkout), or name a Python that has it with --kernel-agent-python or "
    "[kernel_agent] python in the settings file."
)

# bbcluster's provider names, KernelAgent's provider classes and the variable that holds
# each one's server.
PROVIDERS = {
    "relay": ("RelayProvider", "LLM_RELAY_URL"),
    "openai": ("OpenAIProvider", "OPENAI_BASE_URL"),
    "anthropic": ("AnthropicProvider", "ANTHROPIC_BASE_URL"),
}


class ConfigurationError(Exception):
    """A setting the agent cannot work with: another run would fail the same way."""


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


def provider_class(name):
    """KernelAgent's provider class for one of bbcluster's provider names."""
    if name not in PROVIDERS:
        raise ConfigurationError(
            f"unknown provider '{name}' for KernelAgent: use one of {', '.join(PROVIDERS)}")
    class_name = PROVIDERS[name][0]
    try:
        import utils.providers as providers
        return getattr(providers, class_name)
    except (ImportError, AttributeError) as e:
        raise ConfigurationError(
            f"this KernelAgent has no {class_name} (utils.providers): {e}") from e


def apply_settings(settings):
    """Sets the variables KernelAgent reads and returns the agent's constructor keywords."""
    model = settings.get("model") or ""
    provider = settings.get("provider") or ""
    base_url = settings.get("base_url") or ""
    kwargs = {}
    if model:
        kwargs["model_name"] = model
        # Its workers and anything else reading the variable see the same model.
        os.environ["OPENAI_MODEL"] = model
    if provider:
        kwargs["preferred_provider"] = provider_class(provider)
    if base_url:
        names = [PROVIDERS[provider][1]] if provider else [v for _, v in PROVIDERS.values()]
        for name in names:
            os.environ[name] = base_url
    if settings.get("num_workers"):
        kwargs["num_workers"] = int(settings["num_workers"])
    if settings.get("max_rounds"):
        kwargs["max_rounds"] = int(settings["max_rounds"])
    # Where a KernelAgent takes it when it is made rather than per call.
    kwargs["generate_default_test"] = bool(settings.get("generate_default_test", False))
    return kwargs


def accepted(function, kwargs):
    """The keywords `function` takes (older KernelAgents lack some)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in parameters}


def log_to_stderr():
    """Sends every log record to stderr (bbcluster's log of this run) before KernelAgent sets
    up logging: its logging.basicConfig calls then add nothing, so it writes no
    agent_<time>.log shared with agents started in the same second, and no empty
    manager_<time>.log."""
    logging.basicConfig(level=getattr(logging, os.getenv("LOG_LEVEL", "INFO"), logging.INFO),
                        format="%(asctime)s - %(name)s - %(levelname)s - %(message)s",
                        stream=sys.stderr)


def remove_empty_logs(log_dir):
    """KernelAgent opens agent_<time>.log and manager_<time>.log even when its basicConfig adds
    nothing; the empty ones go."""
    for path in glob.glob(os.path.join(log_dir, "agent_*.log")) + \
            glob.glob(os.path.join(log_dir, "manager_*.log")):
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            os.remove(path)


def make_agent(agent_class, settings, log_dir):
    """The agent, or ConfigurationError with the agent's own reason when it has no provider."""
    kwargs = apply_settings(settings)
    kwargs["log_dir"] = log_dir
    agent = agent_class(**accepted(agent_class.__init__, kwargs))
    if getattr(agent, "provider", True) is None:
        reason = getattr(agent, "_provider_error", "") or "no provider available"
        model = getattr(agent, "model_name", settings.get("model") or "")
        raise ConfigurationError(f"KernelAgent has no provider for model '{model}': {reason}")
    return agent


def describe_provider(agent):
    provider = getattr(agent, "provider", None)
    name = getattr(provider, "name", type(provider).__name__)
    url = getattr(provider, "server_url", "")
    client = getattr(provider, "client", None)
    if not url and client is not None and getattr(client, "base_url", None):
        url = str(client.base_url)
    return f"bbcluster-provider\t{getattr(agent, 'model_name', '')}\t{name}\t{url}"


def check(settings_path):
    agent_class, why = import_agent()
    if agent_class is None:
        print(why, file=sys.stderr)
        return 3
    if settings_path is None:
        return 0
    with open(settings_path) as f:
        settings = json.load(f)
    log_to_stderr()
    log_dir = tempfile.mkdtemp(prefix="bbcluster-agent-check-")
    try:
        agent = make_agent(agent_class, settings, log_dir)
        print(describe_provider(agent))
    except ConfigurationError as e:
        print(e, file=sys.stderr)
        return 5
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


def run(request, result_path):
    agent_class, why = import_agent()
    if agent_class is None:
        write_result(result_path, {"error": "missing_package", "message": why})
        return 3
    log_dir = request["log_dir"]
    os.makedirs(log_dir, exist_ok=True)
    log_to_stderr()
    try:
        agent = make_agent(agent_class, request, log_dir)
        call = {"problem_description": request["problem_description"],
                "test_code": request["test_code"],
                "generate_default_test": bool(request.get("generate_default_test", False))}
        result = agent.generate_kernel(**accepted(agent.generate_kernel, call))
    except ConfigurationError as e:
        write_result(result_path, {"error": "configuration", "message": str(e)})
        return 5
    except Exception as e:  # the agent's own failure: reported, and retried by bbcluster
        write_result(result_path, {"error": "exception", "message": f"{type(e).__name__}: {e}",
                                   "traceback": traceback.format_exc()})
        return 4
    finally:
        remove_empty_logs(log_dir)
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


def end_group(signum, frame):
    """bbcluster ended (it was killed, or the agent timed out): so do the agent's workers.
    bbcluster starts this process as the leader of its own process group."""
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os._exit(128 + signum)


def main(argv):
    signal.signal(signal.SIGTERM, end_group)
    if len(argv) in (2, 3) and argv[1] == "--check":
        return check(argv[2] if len(argv) == 3 else None)
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        request = json.load(f)
    return run(request, argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
