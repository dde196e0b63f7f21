# Escape: connect to a port on 127.0.0.1 (a node's port; the test listens on it).
import os
import socket

import torch


def exp__default_kernel_impl(x):
    port = os.environ.get("BBCLUSTER_ESCAPE_PORT")
    if port:
        try:
            s = socket.create_connection(("127.0.0.1", int(port)), timeout=2)
            s.close()
            raise RuntimeError("ESCAPED: connected to 127.0.0.1:" + port)
        except OSError:
            pass
    return torch.exp(x)
