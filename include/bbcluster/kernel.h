#pragma once

// The header for authors of native (.cpp, .cu) bbcluster kernels. Include it first (it is
// precompiled for .cpp kernels), write the kernel as a function with the operator's ATen C++
// signature named <folder>_kernel_impl, and export it:
//
//   #include <bbcluster/kernel.h>
//
//   at::Tensor relu__default_kernel_impl(const at::Tensor& self) {   // folder relu__default
//     return self.clamp_min(0);
//   }
//   BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)
//
// The macro emits an extern "C" factory that bbrunner loads with dlopen. It returns the kernel
// as a c10::KernelFunction and the schema inferred from the function's type; bbrunner compares
// that schema with the operator's and refuses a mismatch, showing both. Never use
// TORCH_LIBRARY in a kernel: a schema mismatch there aborts the process inside dlopen.

#include <memory>

#include <ATen/ATen.h>
#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/op_registration/infer_schema.h>

namespace bbcluster {

/// Bumped when exported_kernel changes; bbrunner refuses another version.
inline constexpr int kernel_abi_version = 1;

/// What a kernel library hands to bbrunner.
struct exported_kernel {
  int abi;
  /// The name of the exported function, e.g. "relu__default_kernel_impl".
  const char* entry;
  c10::KernelFunction function;
  c10::FunctionSchema schema;
};

} // namespace bbcluster

#define BBCLUSTER_EXPORT_KERNEL(fn)                                                             \
  extern "C" __attribute__((visibility("default"))) ::bbcluster::exported_kernel*              \
  bbcluster_make_kernel() {                                                                     \
    return new ::bbcluster::exported_kernel{                                                    \
      ::bbcluster::kernel_abi_version, #fn,                                                     \
      ::c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(fn)),                             \
      ::c10::inferFunctionSchemaFlattenedReturns<decltype(fn)>()};                              \
  }                                                                                             \
  extern "C" __attribute__((visibility("default"))) void bbcluster_destroy_kernel(              \
    ::bbcluster::exported_kernel* kernel) {                                                     \
    delete kernel;                                                                              \
  }
