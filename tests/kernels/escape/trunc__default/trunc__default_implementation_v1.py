# On a GPU slot: open the device node of a GPU other than its own (CUDA_VISIBLE_DEVICES names
# its own), as a kernel that resets CUDA_VISIBLE_DEVICES would use it.
import os

import torch


def trunc__default_kernel_impl(x):
    own = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    opened = []
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia") and name[6:].isdigit() and name[6:] != own:
            try:
                fd = os.open("/dev/" + name, os.O_RDWR)
                os.close(fd)
                opened.append(name)
            except OSError:
                pass
    if opened:
        raise RuntimeError("ESCAPED: opened /dev/" + ", /dev/".join(opened))
    return torch.trunc(x)
