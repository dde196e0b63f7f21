# aten.relu.default in NVIDIA's CuTe DSL (nvidia-cutlass-dsl), with the ABI bbcluster's
# --dsl cutedsl asks of a model: a @cute.kernel, a @cute.jit launcher compiled once per
# element count and dtype, and relu__default_kernel_impl taking the operator's arguments.
import torch
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

THREADS = 256
_compiled = {}


@cute.kernel
def relu__default_cutedsl_kernel(gX: cute.Tensor, gY: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < cute.size(gX):
        x = gX[i]
        if x > 0.0:
            gY[i] = x
        else:
            gY[i] = gX.element_type(0.0)


@cute.jit
def relu__default_kernel_launch(mX: cute.Tensor, mY: cute.Tensor):
    n = cute.size(mX)
    relu__default_cutedsl_kernel(mX, mY).launch(
        grid=((n + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1)
    )


def relu__default_kernel_impl(x):
    if not x.is_cuda:
        raise ValueError("relu__default_kernel_impl: a CUDA tensor is needed, got " + str(x.device))
    flat = x.contiguous().view(-1)
    out = torch.empty_like(flat)
    xs, ys = from_dlpack(flat), from_dlpack(out)
    key = (flat.numel(), flat.dtype)
    launch = _compiled.get(key)
    if launch is None:
        launch = _compiled[key] = cute.compile(relu__default_kernel_launch, xs, ys)
    launch(xs, ys)
    return out.view(x.shape)
