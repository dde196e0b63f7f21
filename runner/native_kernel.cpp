#include "runner/native_kernel.hpp"

#include <sstream>

#include <dlfcn.h>

#include "bbcluster/kernel.h"

namespace bb::runner {

native_kernel::~native_kernel() {
  // The kernel object holds code from the library: destroy it before the library goes.
  if (kernel_ && destroy_)
    destroy_(kernel_);
  if (library_)
    ::dlclose(library_);
}

std::unique_ptr<native_kernel> native_kernel::load(const std::string& path, const std::string& entry,
                                                   const c10::OperatorHandle& op) {
  std::unique_ptr<native_kernel> k(new native_kernel());
  k->library_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!k->library_) {
    const char* why = ::dlerror();
    throw kernel_load_error("load_error", "cannot load " + path + ": " + (why ? why : "dlopen failed"));
  }
  using make_fn = bbcluster::exported_kernel* (*)();
  auto make = reinterpret_cast<make_fn>(::dlsym(k->library_, "bbcluster_make_kernel"));
  k->destroy_ = reinterpret_cast<void (*)(bbcluster::exported_kernel*)>(
    ::dlsym(k->library_, "bbcluster_destroy_kernel"));
  if (!make || !k->destroy_)
    throw kernel_load_error("missing_entry_point",
                            path + " exports no kernel: add BBCLUSTER_EXPORT_KERNEL(" + entry + ")");
  k->kernel_ = make();
  if (!k->kernel_ || k->kernel_->abi != bbcluster::kernel_abi_version)
    throw kernel_load_error("load_error", path + " was built for another kernel ABI");
  if (entry != k->kernel_->entry)
    throw kernel_load_error("missing_entry_point", path + " exports " + k->kernel_->entry
                                                     + ", expected " + entry);
  if (auto diff = c10::findSchemaDifferences(k->kernel_->schema, op.schema())) {
    std::ostringstream os;
    os << "schema mismatch: the kernel " << entry << " has " << k->kernel_->schema
       << ", the operator is " << op.schema() << ": " << *diff;
    throw kernel_load_error("schema_mismatch", os.str());
  }
  k->op_ = op;
  return k;
}

void native_kernel::call(std::vector<c10::IValue>& stack) const {
  // Route by the inputs' device, as the dispatcher would.
  c10::DispatchKeySet keys;
  for (auto& v : stack)
    if (v.isTensor())
      keys = keys | v.toTensor().key_set();
  kernel_->function.callBoxed(*op_, keys, &stack);
}

} // namespace bb::runner
