# Escape: read the node's CURVE secret key.
import os

import torch


def tanh__default_kernel_impl(x):
    path = os.environ.get("BBCLUSTER_ESCAPE_CURVE_FILE")
    if path:
        try:
            with open(path) as f:
                text = f.read()
            raise RuntimeError("ESCAPED: read %s: %s" % (path, text[:40]))
        except OSError:
            pass
    return torch.tanh(x)
