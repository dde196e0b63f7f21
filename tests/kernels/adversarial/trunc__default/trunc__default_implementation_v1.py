# Right values, but it scribbles on its (functional) operator's input.
import torch


def trunc__default_kernel_impl(x):
    out = torch.trunc(x)
    x.fill_(42.0)
    return out
