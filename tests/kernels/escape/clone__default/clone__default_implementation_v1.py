# A correct kernel: its result must survive the others.
import torch


def clone__default_kernel_impl(x):
    return x.clone()
