#include "runner/python_kernel.hpp"

#include <atomic>
#include <optional>
#include <iostream>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <pybind11/embed.h>
#include <pybind11/stl.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace bb::runner {

namespace {

// What is easier said in Python: loading a file as a module, the timing functions a kernel
// could replace, and a traceback without the frames of this helper and of importlib.
constexpr const char* helper_code = R"PY(
import importlib.util, os, sys, threading, time, traceback
import torch

def load(path, name):
    folder = os.path.dirname(os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered as an import would, so that dataclasses, pickle and triton find it.
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        unload(name, module)
        raise
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module

def unload(name, module):
    if sys.modules.get(name) is module:
        del sys.modules[name]

def timers():
    testing = sys.modules.get('triton.testing')
    return [time.perf_counter, time.time, torch.cuda.synchronize, torch.cuda.Event.elapsed_time,
            getattr(testing, 'do_bench', None)]

def comparisons():
    return [torch.allclose, torch.isclose, torch.equal, torch.testing.assert_close,
            torch.Tensor.__eq__, torch.Tensor.allclose]

def tampered(before, now):
    return any(b is not None and n is not b for n, b in zip(now(), before))

threads_before = set()
idents_before = set()

def mark_threads():
    global threads_before, idents_before
    threads_before = set(threading.enumerate())
    idents_before = set(sys._current_frames())

# Threads that libraries start and keep idle (an executor's workers, torch.compile's readers):
# not the kernel's work left running. Such a thread runs a private worker loop of a library
# module (concurrent.futures.thread._worker, multiprocessing's _feed) or is a Thread subclass of
# one; a thread that runs a public function (torch.neg, a kernel's own) or a threading.Timer is
# work left for later, whoever wrote the function.
library_modules = ('torch', 'triton', 'concurrent.futures', 'multiprocessing', 'queue',
                   'asyncio', 'threading', 'logging')

def in_library(module):
    return any(module == m or module.startswith(m + '.') for m in library_modules)

import sysconfig as _sysconfig
installed_dirs = tuple({p for k in ('stdlib', 'platstdlib', 'purelib', 'platlib')
                        for p in [_sysconfig.get_paths().get(k)] if p})

def installed(filename):
    return filename.startswith('<') or filename.startswith(installed_dirs) \
        or '/site-packages/' in filename or '/dist-packages/' in filename

def frames_outside_libraries(frame):
    while frame is not None:
        if not installed(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False

def runs_outside_libraries(t):
    # Any frame of code that is not installed (the kernel's own file, whatever names its
    # functions claim): the thread is doing the kernel's work, idle worker or not.
    return frames_outside_libraries(sys._current_frames().get(t.ident))

def owned_by_library(t):
    if isinstance(t, threading.Timer) or runs_outside_libraries(t):
        return False
    if type(t) is not threading.Thread:
        return in_library(type(t).__module__ or '')
    target = getattr(t, '_target', None)
    function = getattr(target, '__func__', target)
    return getattr(function, '__code__', None) is not None \
        and getattr(function, '__name__', '').startswith('_') \
        and in_library(getattr(function, '__module__', None) or '')

def new_threads(since=None):
    before, idents = (threads_before, idents_before) if since is None else since
    out = [t.name for t in threading.enumerate()
           if t not in before and t.is_alive() and not owned_by_library(t)]
    # A thread that threading does not know (_thread.start_new_thread): only its frames tell
    # whose work it does.
    known = {t.ident for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident not in idents and ident not in known and frames_outside_libraries(frame):
            out.append('a _thread thread running ' + frame.f_code.co_name)
    return out

# The threads of the runner's own Python, before any kernel: one still running beyond them
# after a job is some kernel's, and the runner is not reused.
threads_at_start = (set(threading.enumerate()), set(sys._current_frames()))

def stray_threads():
    return new_threads(threads_at_start)

# Where the JIT libraries a kernel uses compile to (bbrunner's JIT folder, per kernel).
def use_jit_folder(folder):
    os.environ['TRITON_CACHE_DIR'] = os.path.join(folder, 'triton')
    os.environ['TORCHINDUCTOR_CACHE_DIR'] = os.path.join(folder, 'inductor')

# FlagGems' tuning databases (what its autotuner measured and chose, per kernel and shape), as
# the evaluator kept them: one folder per slot that fed the store, merged here into the
# runner's own before the runner's first Python kernel loads. Only FlagGems' own shapes are
# read: files TunedConfig_*.db, tables named <name>-<md5> with a primary key, columns of plain
# types (the statements are built here, each type one of a fixed set), at most 4,096 tables a
# file and 100,000 rows a table. A file that does not read is passed over, the rest still merge.
def seed_tuning(store, to):
    import re, sqlite3, urllib.parse
    file_name = re.compile(r'^TunedConfig_[A-Za-z0-9._-]{1,200}\.db$')
    table_name = re.compile(r'^[A-Za-z0-9_.]{1,200}-[0-9a-f]{32}$')
    column_name = re.compile(r'^[A-Za-z_][A-Za-z0-9_]{0,63}$')
    types = {'INTEGER': 'INTEGER', 'INT': 'INTEGER', 'BIGINT': 'INTEGER', 'BOOLEAN': 'BOOLEAN',
             'FLOAT': 'FLOAT', 'REAL': 'REAL', 'DOUBLE': 'REAL', 'VARCHAR': 'VARCHAR', 'TEXT': 'TEXT', '': ''}
    sources = {}
    for feeder in sorted(os.listdir(store)):
        folder = os.path.join(store, feeder)
        if os.path.islink(folder) or not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if file_name.match(name) and not os.path.islink(path) and os.path.isfile(path):
                sources.setdefault(name, []).append(path)
    os.makedirs(to, exist_ok=True)
    merged, passed_over = 0, []
    for name, paths in sources.items():
        target = sqlite3.connect(os.path.join(to, name))
        try:
            for path in paths:
                try:
                    source = sqlite3.connect('file:' + urllib.parse.quote(path) + '?mode=ro&immutable=1', uri=True)
                except Exception as e:
                    passed_over.append(path + ': ' + str(e))
                    continue
                try:
                    tables = [t for (t,) in source.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 4096")]
                    for table in tables:
                        if not isinstance(table, str) or not table_name.match(table):
                            continue
                        columns = source.execute('PRAGMA table_info("' + table + '")').fetchall()
                        keys = [c[1] for c in sorted(columns, key=lambda c: c[5]) if c[5] > 0]
                        plain = [(c[1], types.get((c[2] or '').upper().split('(')[0].strip())) for c in columns]
                        if not keys or not plain or any(not isinstance(n, str) or not column_name.match(n) or t is None
                                                        for n, t in plain):
                            continue
                        names = ', '.join('"' + n + '"' for n, _ in plain)
                        target.execute('CREATE TABLE IF NOT EXISTS "' + table + '" ('
                                       + ', '.join('"' + n + '" ' + t for n, t in plain)
                                       + ', PRIMARY KEY (' + ', '.join('"' + k + '"' for k in keys) + '))')
                        rows = source.execute('SELECT ' + names + ' FROM "' + table + '" LIMIT 100000').fetchall()
                        try:
                            target.executemany('INSERT OR IGNORE INTO "' + table + '" (' + names + ') VALUES ('
                                               + ', '.join('?' * len(plain)) + ')', rows)
                        except sqlite3.Error:
                            continue  # the runner's table of that name differs: the one merged first stays
                        merged += len(rows)
                    target.commit()
                except Exception as e:
                    target.rollback()
                    passed_over.append(path + ': ' + str(e))
                finally:
                    source.close()
        finally:
            target.close()
    return merged, passed_over

def describe(kind, value, tb):
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith('<'):
        tb = tb.tb_next
    return kind.__name__, str(value), ''.join(traceback.format_exception(kind, value, tb))

# Imported now, when installed, so that do_bench's original is the one recorded.
try:
    if importlib.util.find_spec('triton') is not None:
        import triton.testing
except Exception:
    pass
original_timers = timers()
original_comparisons = comparisons()
)PY";

// The helpers live as long as the process: the interpreter is never finalized (torch does not
// survive it), and a static py::object would be released without the GIL at exit.
struct helpers {
  py::object load, unload, tampered, describe, timers, original_timers, comparisons,
    original_comparisons, mark_threads, new_threads, stray_threads, use_jit_folder, seed_tuning;
};
std::atomic<helpers*> python{nullptr};

// The GIL is held.
python_error to_error(const py::error_already_set& e) {
  try {
    if (auto* h = python.load()) {
      auto d = h->describe(e.type(), e.value(), e.trace()).cast<py::tuple>();
      return python_error(d[0].cast<std::string>(), d[1].cast<std::string>(),
                          d[2].cast<std::string>());
    }
    return python_error(py::str(e.type().attr("__name__")), py::str(e.value()), "");
  } catch (const py::error_already_set&) {
    return python_error("Exception", e.what(), "");
  }
}

std::string start_python() {
  bool started_here = !Py_IsInitialized();
  if (started_here) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = 0;
    config.install_signal_handlers = 0; // SIGINT and SIGTERM stay bbrunner's
    PyStatus status = PyStatus_Ok();
    auto set = [&](wchar_t** field, const char* value) {
      if (!PyStatus_Exception(status) && *value)
        status = PyConfig_SetBytesString(&config, field, value);
    };
    // The build's Python as its own executable would start: its base prefix as home and,
    // through the executable's pyvenv.cfg, its venv's site-packages, also put first on
    // sys.path as PYTHONPATH would, so that no system package shadows the venv's torch.
    if (!std::getenv("PYTHONHOME")) {
      set(&config.home, BB_PYTHON_HOME);
      set(&config.executable, BB_PYTHON_EXECUTABLE);
    }
    if (!std::getenv("PYTHONPATH"))
      set(&config.pythonpath_env, BB_PYTHON_PATH);
    if (PyStatus_Exception(status)) {
      PyConfig_Clear(&config);
      return std::string("Python is misconfigured: ") + (status.err_msg ? status.err_msg : "?");
    }
    try {
      py::initialize_interpreter(&config, 0, nullptr, false);
    } catch (const std::exception& e) {
      return std::string("Python did not start: ") + e.what();
    }
  }
  std::string why;
  {
    py::gil_scoped_acquire gil;
    try {
      py::module_::import("torch");
      py::dict ns;
      py::exec(helper_code, ns);
      python = new helpers{ns["load"],        ns["unload"],       ns["tampered"],
                           ns["describe"],    ns["timers"],       ns["original_timers"],
                           ns["comparisons"], ns["original_comparisons"], ns["mark_threads"],
                           ns["new_threads"], ns["stray_threads"], ns["use_jit_folder"],
                           ns["seed_tuning"]};
    } catch (const py::error_already_set& e) {
      auto err = to_error(e);
      why = "cannot import torch: " + err.type + ": " + err.what();
    }
  }
  // Python starts holding the GIL; give it up so any thread can take it for a call.
  if (started_here)
    PyEval_SaveThread();
  return why;
}

// Taking the GIL on a thread without a Python thread state creates one and drops it after the
// call, some 10 us that a timed call of a small op would carry; so each calling thread keeps
// one for the life of the process. Called without the GIL.
void keep_thread_state() {
  thread_local bool kept = [] {
    if (!PyGILState_GetThisThreadState()) {
      PyGILState_Ensure(); // never released: the state stays
      PyEval_SaveThread();
    }
    return true;
  }();
  (void)kept;
}

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (auto opt = t->cast<c10::OptionalType>())
    return opt->getElementType();
  return t;
}

// A dtype, layout or memory format is an int in an IValue; only the schema tells which.
py::object to_python(const c10::IValue& v, const c10::TypePtr& type) {
  if (v.isInt() && type) {
    switch (unwrap_optional(type)->kind()) {
      case c10::TypeKind::ScalarTypeType:
        return py::cast(static_cast<at::ScalarType>(v.toInt()));
      case c10::TypeKind::MemoryFormatType:
        return py::cast(static_cast<at::MemoryFormat>(v.toInt()));
      case c10::TypeKind::LayoutType:
        return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<at::Layout>(v.toInt()))));
      default: break;
    }
  }
  return torch::jit::toPyObject(v);
}

c10::IValue from_python(py::handle obj) {
  PyObject* p = obj.ptr();
  if (THPVariable_Check(p)) {
    // A subclass can compute lazily, compare as anything or change under the checks.
    if (!THPVariable_CheckExact(p))
      throw python_error("tensor_subclass",
                         "the kernel returned a " + py::str(py::type::of(obj).attr("__qualname__")).cast<std::string>()
                           + ", a subclass of torch.Tensor: outputs must be plain tensors",
                         "");
    return THPVariable_Unpack(p);
  }
  if (obj.is_none())
    return c10::IValue();
  if (PyBool_Check(p)) // before ints: a bool is an int in Python
    return obj.cast<bool>();
  if (PyLong_Check(p))
    return obj.cast<int64_t>();
  if (PyFloat_Check(p))
    return obj.cast<double>();
  if (PyComplex_Check(p))
    return c10::complex<double>(PyComplex_RealAsDouble(p), PyComplex_ImagAsDouble(p));
  if (PyTuple_Check(p) || PyList_Check(p)) {
    std::vector<c10::IValue> items;
    for (auto item : obj)
      items.push_back(from_python(item));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  throw python_error("TypeError",
                     "the kernel returned a " + py::str(py::type::of(obj).attr("__name__")).cast<std::string>()
                       + ", not a tensor, number, None, or tuple or list of them",
                     "");
}

} // namespace

namespace {
std::atomic<bool> started{false};
} // namespace

std::string ensure_python() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    why = start_python();
    started = why.empty();
  });
  return why;
}

bool python_started() {
  return started;
}

// Hidden, as pybind11's types are.
struct __attribute__((visibility("hidden"))) python_kernel::objects {
  std::string name;
  py::object module;
  py::object entry;
  // Destroyed with the GIL held.
  ~objects() {
    try {
      if (module)
        python.load()->unload(name, module);
    } catch (const py::error_already_set&) {
    }
  }
};

python_kernel::python_kernel(std::unique_ptr<objects> py) : py_(std::move(py)) {
}

python_kernel::~python_kernel() {
  py::gil_scoped_acquire gil;
  py_.reset();
}

namespace {

std::mutex pending_tuning_mutex;
std::optional<std::pair<std::string, std::string>> pending_tuning;
bool pending_tuning_done = false;

// The merge python_seed_tuning_before_load asked for, once a process, before its first kernel
// loads; what it read, or why not, goes to the runner's log.
void seed_pending_tuning() {
  std::optional<std::pair<std::string, std::string>> seed;
  {
    std::lock_guard<std::mutex> lock(pending_tuning_mutex);
    // Once, at the process's first load: later, FlagGems may have opened its database already.
    bool first = !pending_tuning_done;
    pending_tuning_done = true;
    if (!first || !pending_tuning)
      return;
    seed.swap(pending_tuning);
  }
  auto started = std::chrono::steady_clock::now();
  size_t rows = 0;
  std::vector<std::string> passed_over;
  auto why = python_seed_tuning(seed->first, seed->second, rows, passed_over);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!why.empty())
    std::cerr << "bbrunner: FlagGems' kept tuning is not used: " << why << "\n";
  else
    std::cerr << "bbrunner: FlagGems' kept tuning: " << rows << " rows merged in " << took << " s\n";
  for (auto& p : passed_over)
    std::cerr << "bbrunner: FlagGems' kept tuning: passed over " << p << "\n";
}

} // namespace

std::unique_ptr<python_kernel> python_kernel::load(const std::string& path,
                                                   const std::string& entry) {
  if (auto why = ensure_python(); !why.empty())
    throw python_error("ImportError", why, "");
  seed_pending_tuning();
  py::gil_scoped_acquire gil; // before the objects, so that it outlives them
  auto py = std::make_unique<objects>();
  py->name = "op_" + std::filesystem::absolute(path).parent_path().filename().string();
  try {
    py->module = python.load()->load(path, py->name);
    py->entry = py::getattr(py->module, entry.c_str(), py::none());
  } catch (const py::error_already_set& e) {
    throw to_error(e);
  }
  if (!PyCallable_Check(py->entry.ptr()))
    throw python_error("MissingEntryPoint", path + " defines no callable '" + entry + "'", "");
  return std::unique_ptr<python_kernel>(new python_kernel(std::move(py)));
}

c10::IValue python_kernel::call(const std::vector<c10::IValue>& args,
                                const std::unordered_map<std::string, c10::IValue>& kwargs,
                                const c10::FunctionSchema& schema) const {
  keep_thread_state();
  py::gil_scoped_acquire gil;
  try {
    const auto& formals = schema.arguments();
    py::tuple pargs(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      pargs[i] = to_python(args[i], i < formals.size() ? formals[i].real_type() : nullptr);
    py::dict pkwargs;
    for (const auto& [name, v] : kwargs) {
      auto index = schema.argumentIndexWithName(name);
      pkwargs[py::str(name)] = to_python(v, index ? formals[*index].real_type() : nullptr);
    }
    return from_python(py_->entry(*pargs, **pkwargs));
  } catch (const py::error_already_set& e) {
    throw to_error(e);
  }
}

bool python_timers_tampered() {
  auto* h = python.load();
  if (!h)
    return false;
  py::gil_scoped_acquire gil;
  try {
    return h->tampered(h->original_timers, h->timers).cast<bool>();
  } catch (const py::error_already_set&) {
    return true;
  }
}

bool python_comparison_tampered() {
  auto* h = python.load();
  if (!h)
    return false;
  py::gil_scoped_acquire gil;
  try {
    return h->tampered(h->original_comparisons, h->comparisons).cast<bool>();
  } catch (const py::error_already_set&) {
    return true;
  }
}

void python_mark_threads() {
  auto* h = python.load();
  if (!h)
    return;
  py::gil_scoped_acquire gil;
  try {
    h->mark_threads();
  } catch (const py::error_already_set&) {
  }
}

namespace {

// The names a thread helper (new_threads, stray_threads) returns; none before Python starts.
std::vector<std::string> thread_names(py::object helpers::*which) {
  auto* h = python.load();
  if (!h)
    return {};
  py::gil_scoped_acquire gil;
  try {
    return (h->*which)().cast<std::vector<std::string>>();
  } catch (const py::error_already_set&) {
    return {"(threading could not be read)"};
  }
}

} // namespace

std::vector<std::string> python_new_threads() {
  return thread_names(&helpers::new_threads);
}

std::vector<std::string> python_stray_threads() {
  return thread_names(&helpers::stray_threads);
}

void python_use_jit_folder(const std::string& folder) {
  // Before Python starts, its os.environ is made from this process's environment.
  auto* h = python.load();
  if (!h) {
    ::setenv("TRITON_CACHE_DIR", (folder + "/triton").c_str(), 1);
    ::setenv("TORCHINDUCTOR_CACHE_DIR", (folder + "/inductor").c_str(), 1);
    return;
  }
  py::gil_scoped_acquire gil;
  try {
    h->use_jit_folder(folder);
  } catch (const py::error_already_set&) {
  }
}

std::string python_seed_tuning(const std::string& store, const std::string& to, size_t& rows,
                               std::vector<std::string>& passed_over) {
  rows = 0;
  passed_over.clear();
  if (auto why = ensure_python(); !why.empty())
    return why;
  auto* h = python.load();
  py::gil_scoped_acquire gil;
  try {
    auto merged = h->seed_tuning(store, to).cast<py::tuple>();
    rows = merged[0].cast<size_t>();
    passed_over = merged[1].cast<std::vector<std::string>>();
    return "";
  } catch (const py::error_already_set& e) {
    auto err = to_error(e);
    return err.type + ": " + err.what();
  }
}

void python_seed_tuning_before_load(const std::string& store, const std::string& to) {
  std::lock_guard<std::mutex> lock(pending_tuning_mutex);
  if (!pending_tuning_done)
    pending_tuning = {store, to};
}

} // namespace bb::runner
