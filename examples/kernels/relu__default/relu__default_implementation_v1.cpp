// relu as a native CPU kernel: an elementwise loop over a contiguous copy of the input.
#include <bbcluster/kernel.h>

#include <ATen/Dispatch.h>

at::Tensor relu__default_kernel_impl(const at::Tensor& self) {
  auto input = self.contiguous();
  auto out = at::empty_like(input);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "relu_kernel", [&] {
    const scalar_t* in = input.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const scalar_t zero(0);
    for (int64_t i = 0, n = input.numel(); i < n; ++i)
      o[i] = in[i] > zero ? in[i] : zero;
  });
  return out.as_strided(self.sizes(), out.strides());
}

BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)
