#pragma once

// A native kernel: a shared object built from a .cpp or .cu with include/bbcluster/kernel.h,
// loaded with dlopen, checked against the operator's schema, called boxed.

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

namespace bbcluster {
struct exported_kernel;
}

namespace bb::runner {

/// Why a kernel could not be loaded: kind is "load_error", "missing_entry_point" or
/// "schema_mismatch"; what() says it in words.
struct kernel_load_error : std::runtime_error {
  kernel_load_error(std::string kind, const std::string& what)
    : std::runtime_error(what), kind(std::move(kind)) {
  }
  std::string kind;
};

class native_kernel {
public:
  native_kernel(const native_kernel&) = delete;
  native_kernel& operator=(const native_kernel&) = delete;
  /// Destroys the kernel object, then closes the library.
  ~native_kernel();

  /// Loads `path`, checks that it exports `entry` and that its schema matches `op`'s.
  static std::unique_ptr<native_kernel> load(const std::string& path, const std::string& entry,
                                             const c10::OperatorHandle& op);

  /// Runs the kernel on a normalized stack, leaving its returns there.
  void call(std::vector<c10::IValue>& stack) const;

private:
  native_kernel() = default;
  void* library_ = nullptr;
  bbcluster::exported_kernel* kernel_ = nullptr;
  void (*destroy_)(bbcluster::exported_kernel*) = nullptr;
  std::optional<c10::OperatorHandle> op_;
  c10::DispatchKeySet keys_;
};

} // namespace bb::runner
