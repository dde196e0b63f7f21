# Replaces the timing functions, as a kernel gaming a Python timer would.
import time

import torch

time.perf_counter = lambda: 0.0


def round__default_kernel_impl(x):
    return torch.round(x)
