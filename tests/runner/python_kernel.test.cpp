// Torch first: c10's logging header defines its own CHECK, which catch.hpp must replace.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "runner/python_kernel.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support.hpp"

using namespace bb::runner;

namespace {

using kwargs_t = std::unordered_map<std::string, c10::IValue>;

const c10::FunctionSchema& schema_of(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

// Writes <dir>/<folder>/<folder>_implementation_v1.py and returns its path.
std::string kernel_file(const bb::test::temp_dir& dir, const std::string& folder,
                        const std::string& source) {
  std::filesystem::create_directories(dir / folder);
  auto path = dir / (folder + "/" + folder + "_implementation_v1.py");
  bb::test::write_file(path, source);
  return path;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The python_error that loading `path` throws.
python_error load_error(const std::string& path, const std::string& entry) {
  try {
    python_kernel::load(path, entry);
  } catch (const python_error& e) {
    return e;
  }
  FAIL("loading " << path << " did not throw");
  return python_error("", "", "");
}

} // namespace

TEST_CASE("python: the interpreter starts once, with torch", "[runner]") {
  CHECK(ensure_python() == "");
  CHECK(ensure_python() == "");
  CHECK_FALSE(python_timers_tampered());
}

TEST_CASE("python: a relu kernel computes what at::relu does, on the same tensors", "[runner]") {
  bb::test::temp_dir dir;
  auto k = python_kernel::load(
    kernel_file(dir, "relu", "import torch\ndef relu_kernel_impl(x):\n    return torch.relu(x)\n"),
    "relu_kernel_impl");
  auto x = at::randn({4, 5});
  auto out = k->call({x}, {}, schema_of("aten::relu"));
  REQUIRE(out.isTensor());
  CHECK(at::equal(out.toTensor(), at::relu(x)));

  // In place: the kernel's tensor is the caller's, not a copy.
  auto inplace = python_kernel::load(
    kernel_file(dir, "relu_", "def relu__kernel_impl(x):\n    return x.relu_()\n"),
    "relu__kernel_impl");
  auto y = at::randn({8});
  auto expected = at::relu(y);
  auto res = inplace->call({y}, {}, schema_of("aten::relu_"));
  CHECK(res.toTensor().data_ptr() == y.data_ptr());
  CHECK(at::equal(y, expected));
}

TEST_CASE("python: dtypes, layouts, memory formats and devices become torch objects", "[runner]") {
  bb::test::temp_dir dir;
  auto k = python_kernel::load(kernel_file(dir, "_to_copy", R"PY(
import torch
def _to_copy_kernel_impl(x, dtype=None, layout=None, device=None, memory_format=None, **rest):
    assert dtype is torch.float16, dtype
    assert layout is torch.strided, layout
    assert device == torch.device('cpu'), device
    assert memory_format is torch.preserve_format, memory_format
    assert rest == {'non_blocking': False}, rest
    return x.to(dtype)
)PY"),
                               "_to_copy_kernel_impl");
  auto x = at::randn({3, 3});
  kwargs_t kwargs{{"dtype", c10::IValue(at::kHalf)},
                  {"layout", c10::IValue(at::kStrided)},
                  {"device", c10::IValue(at::Device("cpu"))},
                  {"memory_format", c10::IValue(at::MemoryFormat::Preserve)},
                  {"non_blocking", c10::IValue(false)}};
  auto out = k->call({x}, kwargs, schema_of("aten::_to_copy")).toTensor();
  CHECK(out.scalar_type() == at::kHalf);
  CHECK(at::equal(out, x.to(at::kHalf)));

  // A positional dtype, matched by position in aten::to.dtype.
  auto to = python_kernel::load(kernel_file(dir, "to__dtype", R"PY(
import torch
def to__dtype_kernel_impl(x, dtype, non_blocking=False, copy=False):
    assert isinstance(dtype, torch.dtype), type(dtype)
    return x.to(dtype)
)PY"),
                                "to__dtype_kernel_impl");
  auto d = to->call({x, c10::IValue(at::kDouble)}, {}, schema_of("aten::to", "dtype")).toTensor();
  CHECK(d.scalar_type() == at::kDouble);
}

TEST_CASE("python: a list of tensors goes in as a list", "[runner]") {
  bb::test::temp_dir dir;
  auto k = python_kernel::load(kernel_file(dir, "cat", R"PY(
import torch
def cat_kernel_impl(tensors, dim=0):
    assert isinstance(tensors, list) and len(tensors) == 2
    return torch.cat(tensors, dim)
)PY"),
                               "cat_kernel_impl");
  auto a = at::randn({2, 3});
  auto b = at::randn({2, 4});
  auto out = k->call({c10::List<at::Tensor>({a, b}), c10::IValue(int64_t{1})}, {},
                     schema_of("aten::cat"));
  CHECK(at::equal(out.toTensor(), at::cat({a, b}, 1)));
}

TEST_CASE("python: tuples, lists, numbers and bools come back", "[runner]") {
  bb::test::temp_dir dir;
  auto k = python_kernel::load(kernel_file(dir, "max__dim", R"PY(
import torch
def max__dim_kernel_impl(x, dim, keepdim=False):
    return torch.max(x, dim, keepdim)
)PY"),
                               "max__dim_kernel_impl");
  auto x = at::randn({4, 6});
  auto out = k->call({x, c10::IValue(int64_t{1})}, {}, schema_of("aten::max", "dim"));
  REQUIRE(out.isTuple());
  auto [values, indices] = at::max(x, 1);
  const auto& items = out.toTupleRef().elements();
  REQUIRE(items.size() == 2);
  CHECK(at::equal(items[0].toTensor(), values));
  CHECK(at::equal(items[1].toTensor(), indices));

  auto misc = python_kernel::load(kernel_file(dir, "misc", R"PY(
def misc_kernel_impl(x):
    return [x.numel(), 2.5, True, None]
)PY"),
                                  "misc_kernel_impl");
  auto m = misc->call({at::ones({3})}, {}, schema_of("aten::relu"));
  REQUIRE(m.isTuple());
  const auto& ms = m.toTupleRef().elements();
  REQUIRE(ms.size() == 4);
  CHECK(ms[0].toInt() == 3);
  CHECK(ms[1].toDouble() == 2.5);
  CHECK(ms[2].isBool());
  CHECK(ms[2].toBool());
  CHECK(ms[3].isNone());
}

TEST_CASE("python: the kernel's folder is on sys.path while it imports", "[runner]") {
  bb::test::temp_dir dir;
  auto path = kernel_file(dir, "neg", "from neg_helper import negate\n"
                                      "def neg_kernel_impl(x):\n    return negate(x)\n");
  bb::test::write_file(dir / "neg/neg_helper.py", "def negate(x):\n    return -x\n");
  auto k = python_kernel::load(path, "neg_kernel_impl");
  auto x = at::randn({5});
  CHECK(at::equal(k->call({x}, {}, schema_of("aten::neg")).toTensor(), -x));
}

TEST_CASE("python: a file that fails to import names the file and line", "[runner]") {
  bb::test::temp_dir dir;
  auto syntax = kernel_file(dir, "abs", "import torch\n\ndef abs_kernel_impl(x):\n    return x +\n");
  auto e = load_error(syntax, "abs_kernel_impl");
  CHECK(e.type == "SyntaxError");
  CHECK(contains(e.traceback, syntax));
  CHECK(contains(e.traceback, "line 4"));

  auto raising = kernel_file(dir, "exp", "import torch\nx = 1\nraise ValueError('broken at import')\n");
  auto r = load_error(raising, "exp_kernel_impl");
  CHECK(r.type == "ValueError");
  CHECK(std::string(r.what()) == "broken at import");
  CHECK(contains(r.traceback, "File \"" + raising + "\", line 3"));
  CHECK_FALSE(contains(r.traceback, "importlib"));
}

TEST_CASE("python: a module without the entry point", "[runner]") {
  bb::test::temp_dir dir;
  auto missing = load_error(kernel_file(dir, "sin", "def other(x):\n    return x\n"),
                            "sin_kernel_impl");
  CHECK(missing.type == "MissingEntryPoint");
  CHECK(contains(missing.what(), "sin_kernel_impl"));
  auto not_callable = load_error(kernel_file(dir, "cos", "cos_kernel_impl = 3\n"),
                                 "cos_kernel_impl");
  CHECK(not_callable.type == "MissingEntryPoint");
}

TEST_CASE("python: an exception inside the call gives type, message and traceback", "[runner]") {
  bb::test::temp_dir dir;
  auto path = kernel_file(dir, "tanh", "import torch\n\ndef tanh_kernel_impl(x):\n"
                                       "    raise NotImplementedError('no tanh yet')\n");
  auto k = python_kernel::load(path, "tanh_kernel_impl");
  try {
    k->call({at::ones({2})}, {}, schema_of("aten::tanh"));
    FAIL("the call did not throw");
  } catch (const python_error& e) {
    CHECK(e.type == "NotImplementedError");
    CHECK(std::string(e.what()) == "no tanh yet");
    CHECK(contains(e.traceback, "File \"" + path + "\", line 4, in tanh_kernel_impl"));
    CHECK(contains(e.traceback, "NotImplementedError: no tanh yet"));
  }
}

TEST_CASE("python: a kernel that replaces time.perf_counter is seen", "[runner]") {
  bb::test::temp_dir dir;
  CHECK_FALSE(python_timers_tampered());
  // Loading replaces the timer; calling the kernel puts it back.
  auto k = python_kernel::load(kernel_file(dir, "sqrt", R"PY(
import time
_original = time.perf_counter
time.perf_counter = lambda: 0.0
def sqrt_kernel_impl(x):
    time.perf_counter = _original
    return x.sqrt()
)PY"),
                               "sqrt_kernel_impl");
  CHECK(python_timers_tampered());
  k->call({at::ones({2})}, {}, schema_of("aten::sqrt"));
  CHECK_FALSE(python_timers_tampered());
}

TEST_CASE("python: a thread a kernel starts with _thread, which threading does not list, is seen",
          "[runner]") {
  bb::test::temp_dir dir;
  auto k = python_kernel::load(kernel_file(dir, "floor", R"PY(
import _thread
import time
def _fill(x, out):
    time.sleep(3)
    out.copy_(x.floor())
def floor_kernel_impl(x):
    out = x.new_empty(x.shape)
    _thread.start_new_thread(_fill, (x, out))
    return out
)PY"),
                               "floor_kernel_impl");
  python_mark_threads();
  CHECK(python_new_threads().empty());
  k->call({at::ones({2})}, {}, schema_of("aten::floor"));
  std::vector<std::string> seen;
  for (int i = 0; i < 100 && seen.empty(); ++i) { // until the thread runs its first line
    seen = python_new_threads();
    if (seen.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "a _thread thread running _fill");
}

TEST_CASE("python: FlagGems' kept tuning databases merge into the runner's, and nothing they hold runs",
          "[runner]") {
  bb::test::temp_dir dir;
  auto store = dir / "store";
  for (auto* feeder : {"/a_slot0", "/b_slot1", "/c_slot2"})
    std::filesystem::create_directories(store + feeder);
  std::filesystem::create_directories(dir / "outside");
  bb::test::write_file(store + "/a_slot0/notes.db", "not FlagGems' name");
  // A file that is not a database, from a third slot: passed over, the others still merge.
  bb::test::write_file(store + "/c_slot2/TunedConfig_x.db", std::string(4096, 'x'));
  // Two slots' databases: FlagGems' table with overlapping rows; the second also holds a table
  // without a primary key, one of another name's shape, a column of a type that is not plain,
  // a trigger and a view.
  const std::string table = "mm_kernel_1f-0123456789abcdef0123456789abcdef";
  const std::string other = "-0123456789abcdef0123456789abcdef";
  auto maker = "import sqlite3\n"
               "def make(path, script):\n"
               "    c = sqlite3.connect(path)\n"
               "    c.executescript(script)\n"
               "    c.commit()\n"
               "    c.close()\n"
               "make('" + store + "/a_slot0/TunedConfig_x.db', '''\n"
               "CREATE TABLE \"" + table + "\" (key_0 INTEGER, key_1 VARCHAR, \"BLOCK\" INTEGER, num_warps INTEGER,\n"
               "  PRIMARY KEY (key_0, key_1));\n"
               "INSERT INTO \"" + table + "\" VALUES (1, 'f32', 64, 4), (2, 'f32', 128, 8);''')\n"
               "make('" + store + "/b_slot1/TunedConfig_x.db', '''\n"
               "CREATE TABLE \"" + table + "\" (key_0 INTEGER, key_1 VARCHAR, \"BLOCK\" INTEGER, num_warps INTEGER,\n"
               "  PRIMARY KEY (key_0, key_1));\n"
               "INSERT INTO \"" + table + "\" VALUES (2, 'f32', 256, 8), (3, 'f16', 32, 2);\n"
               "CREATE TABLE \"nokey" + other + "\" (a INTEGER);\n"
               "INSERT INTO \"nokey" + other + "\" VALUES (1);\n"
               "CREATE TABLE \"evil\"\"; DROP TABLE x; --\" (k INTEGER PRIMARY KEY, v INTEGER);\n"
               "INSERT INTO \"evil\"\"; DROP TABLE x; --\" VALUES (7, 8);\n"
               "CREATE TABLE \"odd" + other + "\" (k INTEGER PRIMARY KEY, v \"INTEGER COLLATE NOCASE\");\n"
               "CREATE TABLE \"log" + other + "\" (n INTEGER PRIMARY KEY);\n"
               "CREATE TRIGGER spy AFTER INSERT ON \"" + table + "\" BEGIN\n"
               "  INSERT INTO \"log" + other + "\" VALUES (NEW.key_0); END;\n"
               "CREATE VIEW everything AS SELECT * FROM \"" + table + "\";''')\n"
               "def maker_kernel_impl():\n"
               "    return None\n";
  python_kernel::load(kernel_file(dir, "maker", maker), "maker_kernel_impl");
  std::filesystem::create_directory_symlink(dir / "outside", store + "/linked");

  size_t rows = 0;
  std::vector<std::string> passed_over;
  auto to = dir / "runner/flaggems/config_cache";
  CHECK(python_seed_tuning(store, to, rows, passed_over) == "");
  CHECK(rows == 4); // 2 + 2 of FlagGems' table; the log table is empty
  REQUIRE(passed_over.size() == 1);
  CHECK(passed_over[0].rfind(store + "/c_slot2/TunedConfig_x.db: ", 0) == 0);

  auto reader = "import sqlite3\n"
                "c = sqlite3.connect('" + to + "/TunedConfig_x.db')\n"
                "rows = c.execute('SELECT key_0, key_1, \"BLOCK\" FROM \"" + table + "\" ORDER BY key_0').fetchall()\n"
                "kinds = sorted(r[0] + ':' + r[1] for r in c.execute('SELECT type, name FROM sqlite_master'))\n"
                "open('" + dir.path + "/merged.txt', 'w').write(repr(rows) + '\\n' + repr(kinds) + '\\n')\n"
                "def reader_kernel_impl():\n"
                "    return None\n";
  python_kernel::load(kernel_file(dir, "reader", reader), "reader_kernel_impl");
  // The first slot's row wins where both hold one; the trigger, the view, and the tables without
  // a key, of another name's shape or of a type that is not plain are not carried over.
  CHECK(bb::test::read_file(dir / "merged.txt")
        == "[(1, 'f32', 64), (2, 'f32', 128), (3, 'f16', 32)]\n"
           "['index:sqlite_autoindex_" + table + "_1', 'table:log" + other + "', 'table:" + table + "']\n");
  CHECK(!std::filesystem::exists(to + "/notes.db"));

  // A store that is not there: an error, nothing merged.
  CHECK(python_seed_tuning(dir / "none", dir / "runner2", rows, passed_over) != "");
  CHECK(rows == 0);
}
