# Allocates far beyond any machine's memory.
import torch


def log__default_kernel_impl(x):
    waste = torch.empty(1 << 42, dtype=torch.float32)
    return waste[: x.numel()].view_as(x)
