# Escape: read a file in the user's home.
import os

import torch


def cos__default_kernel_impl(x):
    path = os.environ.get("BBCLUSTER_ESCAPE_HOME_FILE")
    if path:
        try:
            with open(path) as f:
                text = f.read()
            raise RuntimeError("ESCAPED: read %s: %s" % (path, text[:40]))
        except OSError:
            pass
    return torch.cos(x)
