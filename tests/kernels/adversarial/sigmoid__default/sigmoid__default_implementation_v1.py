# The wrong shape.
import torch


def sigmoid__default_kernel_impl(x):
    return torch.sigmoid(x).flatten()[:1]
