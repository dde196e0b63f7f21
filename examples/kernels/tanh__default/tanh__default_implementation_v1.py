# A file without its entry point, kept as an example: the function must be named
# tanh__default_kernel_impl. The folder is reported and the rest of the directory runs.
import torch


def tanh_kernel(x):
    return torch.tanh(x)
