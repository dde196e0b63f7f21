// Segfaults inside the call.
#include <bbcluster/kernel.h>

at::Tensor relu__default_kernel_impl(const at::Tensor& self) {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
  return self;
}

BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)
