# Escape: connect to another address than loopback (the machine's own, where the test
# listens), as a kernel reaching the network would.
import os
import socket

import torch


def sin__default_kernel_impl(x):
    host = os.environ.get("BBCLUSTER_ESCAPE_HOST")
    port = os.environ.get("BBCLUSTER_ESCAPE_PORT")
    if host and port:
        try:
            s = socket.create_connection((host, int(port)), timeout=2)
            s.close()
            raise RuntimeError("ESCAPED: connected to %s:%s" % (host, port))
        except OSError:
            pass
    return torch.sin(x)
