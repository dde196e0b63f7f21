// A CUDA kernel that never ends: only the call timeout stops it.
#include <bbcluster/kernel.h>

#include <c10/cuda/CUDAStream.h>

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {
  }
}

at::Tensor relu__default_kernel_impl(const at::Tensor& self) {
  auto flag = at::zeros({1}, self.options().dtype(at::kInt));
  spin<<<1, 1, 0, c10::cuda::getCurrentCUDAStream()>>>(flag.data_ptr<int>());
  return at::relu(self);
}

BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)
