// A wrong kernel, kept as an example of how failures are reported: it adds instead of
// subtracting, so every input is incorrect and the report shows the max errors.
#include <bbcluster/kernel.h>

at::Tensor sub__Tensor_kernel_impl(const at::Tensor& self, const at::Tensor& other,
                                   const at::Scalar& alpha) {
  return at::add(self, other, alpha);
}

BBCLUSTER_EXPORT_KERNEL(sub__Tensor_kernel_impl)
