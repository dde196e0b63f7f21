#include "runner/opinfo.hpp"

#include <filesystem>

#include <pybind11/embed.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "runner/python_kernel.hpp"

namespace py = pybind11;

namespace bb::runner {

namespace {

// bbcluster_opinfo.py beside bbrunner; imported once, kept for the process.
py::object opinfo_module() {
  static py::object* module = nullptr;
  if (module)
    return *module;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto dir = ec ? std::string(".") : self.parent_path().string();
  auto sys_path = py::module_::import("sys").attr("path");
  sys_path.attr("insert")(0, dir);
  try {
    module = new py::object(py::module_::import("bbcluster_opinfo"));
  } catch (...) {
    sys_path.attr("remove")(dir);
    throw;
  }
  sys_path.attr("remove")(dir);
  return *module;
}

} // namespace

bool is_opinfo_sample(const std::string& text) {
  return text.rfind("opinfo(", 0) == 0;
}

built_call build_opinfo_sample(const std::string& text, const c10::FunctionSchema& schema,
                               const at::Device& device) {
  if (auto why = ensure_python(); !why.empty())
    throw python_error("PythonUnavailable", why, "");
  py::gil_scoped_acquire gil;
  built_call out;
  try {
    // The sample's own split into positional and keyword arguments, as BackendBench calls
    // the kernel with them; each value converted to its formal's type.
    auto sample = opinfo_module().attr("sample_call")(text, device.str()).cast<py::tuple>();
    py::tuple args = sample[0];
    py::dict kwargs = sample[1];
    if (args.size() > schema.arguments().size())
      throw python_error("TypeError", schema.name() + " takes " + std::to_string(schema.arguments().size())
                                        + " arguments; the sample gives " + std::to_string(args.size()), "");
    for (size_t i = 0; i < args.size(); ++i)
      out.args.push_back(torch::jit::argumentToIValue(schema, i, args[i]));
    for (auto item : kwargs) {
      auto name = item.first.cast<std::string>();
      auto index = schema.argumentIndexWithName(name);
      if (!index)
        throw python_error("TypeError", schema.name() + " has no argument '" + name + "'", "");
      out.kwargs.emplace(name, torch::jit::argumentToIValue(schema, *index, item.second));
    }
  } catch (py::error_already_set& e) {
    auto type = py::str(e.type().attr("__name__")).cast<std::string>();
    auto what = py::str(e.value()).cast<std::string>();
    throw python_error(type, what, "");
  } catch (const py::cast_error& e) {
    throw python_error("TypeError", std::string("opinfo sample: ") + e.what(), "");
  }
  return out;
}

} // namespace bb::runner
