# aten.relu.default in Helion, with the ABI bbcluster's --dsl helion asks of a model: a
# @helion.kernel with a fixed config (no autotuning on the first call), called as a Python
# function from relu__default_kernel_impl.
import torch
import helion
import helion.language as hl


@helion.kernel(config=helion.Config(block_sizes=[1024], num_warps=4))
def relu__default_helion_kernel(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.relu(x[tile])
    return out


def relu__default_kernel_impl(x):
    if not x.is_cuda:
        raise ValueError("relu__default_kernel_impl: a CUDA tensor is needed, got " + str(x.device))
    return relu__default_helion_kernel(x.contiguous().view(-1)).view(x.shape)
