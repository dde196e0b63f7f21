// Aborts inside the call.
#include <bbcluster/kernel.h>

#include <cstdlib>

at::Tensor abs__default_kernel_impl(const at::Tensor& self) {
  std::abort();
}

BBCLUSTER_EXPORT_KERNEL(abs__default_kernel_impl)
