# add.Tensor in PyTorch, as an LLM-written kernel would call it: out = self + alpha * other.
import torch


def add__Tensor_kernel_impl(self, other, *, alpha=1):
    if alpha != 1:
        other = other * alpha
    return torch.add(self, other)
