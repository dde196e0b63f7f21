# sin in PyTorch, correct: evaluated with the same inputs, checks and timer as native kernels.
import torch


def sin__default_kernel_impl(self):
    return torch.sin(self)
