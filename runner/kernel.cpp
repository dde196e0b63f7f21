#include "runner/kernel.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "runner/native_kernel.hpp"
#include "runner/python_kernel.hpp"

namespace bb::runner {

namespace {

class aten_kernel : public kernel {
public:
  explicit aten_kernel(c10::OperatorHandle op) : op_(std::move(op)) {
  }
  c10::IValue call(prepared_input& in) const override {
    auto stack = in.stack;
    op_.callBoxed(stack);
    return result_of(stack);
  }

private:
  c10::OperatorHandle op_;
};

class loaded_native_kernel : public kernel {
public:
  explicit loaded_native_kernel(std::unique_ptr<native_kernel> k) : k_(std::move(k)) {
  }
  c10::IValue call(prepared_input& in) const override {
    auto stack = in.stack;
    k_->call(stack);
    return result_of(stack);
  }

private:
  std::unique_ptr<native_kernel> k_;
};

class loaded_python_kernel : public kernel {
public:
  loaded_python_kernel(std::unique_ptr<python_kernel> k, const c10::FunctionSchema& schema)
    : k_(std::move(k)), schema_(schema) {
  }
  bool takes_call_args() const override {
    return true;
  }
  c10::IValue call(prepared_input& in) const override {
    return k_->call(in.args, in.kwargs, schema_);
  }

private:
  std::unique_ptr<python_kernel> k_;
  const c10::FunctionSchema& schema_;
};

// The artefact's source as a file: its own path when that file still holds the same source
// (a local node), else a copy in a scratch folder of this runner (a node without the file).
std::string source_file(const artefact& a) {
  std::ifstream in(a.path, std::ios::binary);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str() == a.source)
      return a.path;
  }
  auto dir = std::filesystem::temp_directory_path()
             / ("bbrunner-" + std::to_string(::getpid())) / a.hash.substr(0, 16);
  std::filesystem::create_directories(dir);
  auto path = dir / std::filesystem::path(a.path).filename();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << a.source;
  return path.string();
}

} // namespace

c10::IValue result_of(std::vector<c10::IValue>& stack) {
  if (stack.size() == 1)
    return std::move(stack[0]);
  return c10::ivalue::Tuple::create(std::move(stack));
}

prepared_input prepare_shared(const built_call& call, const c10::FunctionSchema& schema, const kernel* k) {
  prepared_input p;
  if (k && k->takes_call_args()) {
    p.args = call.args;
    for (auto& [name, v] : call.kwargs)
      p.kwargs.emplace(name, v);
  } else {
    p.stack = stack_of(call, schema);
  }
  return p;
}

prepared_input prepare(const built_call& call, const c10::FunctionSchema& schema, const kernel* k) {
  return prepare_shared(clone_call(call), schema, k);
}

std::unique_ptr<kernel> make_aten_kernel(const c10::OperatorHandle& op) {
  return std::make_unique<aten_kernel>(op);
}

std::unique_ptr<kernel> load_kernel(const artefact& a, const c10::OperatorHandle& op) {
  if (a.kind == kernel_kind::aten)
    return make_aten_kernel(op);
  if (is_native(a.kind)) {
    if (a.object_path.empty())
      throw kernel_load_error("load_error", a.path + " was not compiled for this node");
    return std::make_unique<loaded_native_kernel>(native_kernel::load(a.object_path, a.entry, op));
  }
  if (a.kind == kernel_kind::py) {
    if (auto why = ensure_python(); !why.empty())
      throw kernel_load_error("load_error", "Python kernels cannot run here: " + why);
    return std::make_unique<loaded_python_kernel>(python_kernel::load(source_file(a), a.entry),
                                                  op.schema());
  }
  throw kernel_load_error("load_error", std::string("kernel kind '") + to_string(a.kind) + "' is not supported");
}

} // namespace bb::runner
