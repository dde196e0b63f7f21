// relu as a CUDA kernel, for float, half and bfloat16.
#include <bbcluster/kernel.h>

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>

namespace {

template <class T>
__global__ void relu_kernel(const T* in, T* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    float x = static_cast<float>(in[i]);
    out[i] = static_cast<T>(x > 0.f ? x : 0.f);
  }
}

} // namespace

at::Tensor relu__default_kernel_impl(const at::Tensor& self) {
  auto input = self.contiguous();
  auto out = at::empty_like(input);
  int64_t n = input.numel();
  if (n == 0)
    return out;
  int threads = 256;
  auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "relu_cuda", [&] {
    relu_kernel<scalar_t><<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      input.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  return out;
}

BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)
