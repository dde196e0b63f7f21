// Throws a C++ exception.
#include <bbcluster/kernel.h>

#include <stdexcept>

at::Tensor exp__default_kernel_impl(const at::Tensor& self) {
  throw std::runtime_error("this kernel throws");
}

BBCLUSTER_EXPORT_KERNEL(exp__default_kernel_impl)
