// mul.Tensor as a CUDA kernel for same-shape float inputs; other cases fall back to ATen.
#include <bbcluster/kernel.h>

#include <c10/cuda/CUDAStream.h>

namespace {

__global__ void mul_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n)
    out[i] = a[i] * b[i];
}

} // namespace

at::Tensor mul__Tensor_kernel_impl(const at::Tensor& self, const at::Tensor& other) {
  if (!self.is_cuda() || self.sizes() != other.sizes() || self.scalar_type() != at::kFloat
      || other.scalar_type() != at::kFloat)
    return at::mul(self, other);
  auto a = self.contiguous();
  auto b = other.contiguous();
  auto out = at::empty_like(a);
  int64_t n = a.numel();
  if (n > 0) {
    int threads = 256;
    auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
    mul_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  }
  return out;
}

BBCLUSTER_EXPORT_KERNEL(mul__Tensor_kernel_impl)
