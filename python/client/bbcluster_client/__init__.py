"""Client of `bbcluster serve`: evaluate PyTorch operator kernels on a bbcluster from Python.

    from bbcluster_client import Client

    with Client("tcp://127.0.0.1:5590") as client:
        result = client.evaluate("relu", "relu_kernel.py")
        print(result.outcome, result.correct, result.speedup)

The wire protocol is docs/serving.md in the bbcluster repository.
"""

from .client import DEFAULT_ADDRESS, DEFAULT_TIMEOUT_S, Client, KernelSpec, default_client_name
from .errors import BBClusterError, RequestCancelled, ServerError, Timeout
from .kernels import Kernel, kernel_of, read_kernel_file, scan_kernel_dir
from .keys import KeyPair, read_key_file
from .pending import RequestFuture
from .records import CorrectnessResult, InputResult, PerformanceResult, Result, SweepResult

__version__ = "0.1.0"

__all__ = [
    "BBClusterError", "Client", "CorrectnessResult", "DEFAULT_ADDRESS", "DEFAULT_TIMEOUT_S", "InputResult",
    "Kernel", "KernelSpec", "KeyPair", "PerformanceResult", "RequestCancelled", "RequestFuture",
    "Result", "ServerError", "SweepResult", "Timeout", "default_client_name", "kernel_of",
    "read_kernel_file", "read_key_file", "scan_kernel_dir",
]
