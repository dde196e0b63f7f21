# Floods stdout and stderr (tens of MB), then answers correctly: the protocol must not care.
import sys

import torch


def sqrt__default_kernel_impl(x):
    line = "garbage " * 1024 + "\n"
    for _ in range(2000):
        sys.stdout.write(line)
        sys.stderr.write(line)
    sys.stdout.flush()
    return torch.sqrt(x)
