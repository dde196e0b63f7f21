// A kernel with the wrong signature, kept as an example: aten::neg takes one Tensor, this
// takes an extra int. bbrunner refuses it and shows both schemas.
#include <bbcluster/kernel.h>

at::Tensor neg__default_kernel_impl(const at::Tensor& self, int64_t times) {
  return self * (-times);
}

BBCLUSTER_EXPORT_KERNEL(neg__default_kernel_impl)
