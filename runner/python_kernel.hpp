#pragma once

// A Python kernel run inside bbrunner: an embedded interpreter (torch's own Python bindings)
// calls the kernel's function on the same tensors the C++ inputs, reference and timer use.

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

namespace bb::runner {

/// A failure inside Python: exception type name, message (what()), and the formatted traceback.
struct python_error : std::runtime_error {
  python_error(std::string type, const std::string& message, std::string traceback)
    : std::runtime_error(message), type(std::move(type)), traceback(std::move(traceback)) {
  }
  std::string type;
  std::string traceback;
};

/// Starts the embedded interpreter once per process (later calls return the first answer),
/// imports torch, records the timing functions, and releases the GIL. Unless the environment
/// sets PYTHONHOME / PYTHONPATH, the interpreter is the build's BBCLUSTER_PYTHON: its
/// sys.base_prefix as home and its site-packages first on sys.path, so a venv works.
/// Returns "" or why Python cannot run here.
std::string ensure_python();

/// Whether ensure_python has started the interpreter in this process.
bool python_started();

/// A Python kernel: the function `entry` of one file, loaded as a fresh module.
class python_kernel {
public:
  python_kernel(const python_kernel&) = delete;
  python_kernel& operator=(const python_kernel&) = delete;
  /// Releases the Python objects with the GIL held.
  ~python_kernel();

  /// Loads `path` as module op_<folder> (importlib, the file's folder on sys.path while it
  /// runs). Throws python_error with the traceback when the file fails to import, and with
  /// type "MissingEntryPoint" when the module has no callable `entry`.
  static std::unique_ptr<python_kernel> load(const std::string& path, const std::string& entry);

  /// Calls entry(*args, **kwargs) as BackendBench calls impl(*args, **kwargs). Tensors are
  /// shared, not copied; ints the schema types as ScalarType, Layout or MemoryFormat (by
  /// position for args, by name for kwargs) become torch.dtype, torch.layout and
  /// torch.memory_format. The result comes back as a tensor, a number or bool, None, or a
  /// c10 tuple for a Python tuple or list. Throws python_error (with traceback) when the
  /// call raises or returns something else.
  c10::IValue call(const std::vector<c10::IValue>& args,
                   const std::unordered_map<std::string, c10::IValue>& kwargs,
                   const c10::FunctionSchema& schema) const;

private:
  struct objects;
  explicit python_kernel(std::unique_ptr<objects> py);
  std::unique_ptr<objects> py_;
};

/// True when a loaded module replaced a timing function (time.perf_counter, time.time,
/// torch.cuda.synchronize, torch.cuda.Event.elapsed_time, triton.testing.do_bench) since
/// ensure_python() recorded them; false when Python has not started.
bool python_timers_tampered();

/// True when a loaded module replaced a comparison function (torch.allclose, torch.isclose,
/// torch.equal, torch.testing.assert_close, Tensor.__eq__, Tensor.allclose); false when Python
/// has not started.
bool python_comparison_tampered();

/// Points Triton's and TorchInductor's caches at `folder` (its triton/ and inductor/), for the
/// kernel about to load: in the environment before Python starts, in os.environ after.
void python_use_jit_folder(const std::string& folder);

/// Merges FlagGems' tuning databases kept in the store's folder `store` (one subfolder per
/// slot that fed it, each holding FlagGems' `TunedConfig_*.db` files) into the folder `to`
/// (FlagGems' config_cache of this runner), starting Python if it has not started. Only tables
/// shaped as FlagGems' (`<name>-<md5>`, a primary key, columns of plain types) are read, row
/// by row; a row the runner's database holds already stays. Sets `rows` to the rows merged and
/// `passed_over` to the files that did not read (each with why); returns "" or why nothing could.
std::string python_seed_tuning(const std::string& store, const std::string& to, size_t& rows,
                               std::vector<std::string>& passed_over);

/// Has this process's first python_kernel::load run python_seed_tuning(store, to) first, inside
/// the load's time (a call after that load does nothing); what it merged, or why not, goes to
/// stderr.
void python_seed_tuning_before_load(const std::string& store, const std::string& to);

/// Records the Python threads alive now (nothing when Python has not started).
void python_mark_threads();

/// The names of Python threads alive now that were not at the last python_mark_threads().
std::vector<std::string> python_new_threads();

/// The names of Python threads alive now that the runner's Python did not start with and no
/// library owns (a kernel's, left running past its job); empty when Python has not started.
std::vector<std::string> python_stray_threads();

} // namespace bb::runner
