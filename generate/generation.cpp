#include "generate/generation.hpp"

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>

#include "suite/ops.hpp"
#include "results/scoring.hpp"

namespace bb {

const char* dsl_title(kernel_dsl dsl) {
  switch (dsl) {
    case kernel_dsl::triton: return "Triton";
    case kernel_dsl::pytorch: return "PyTorch";
    case kernel_dsl::cuda: return "CUDA";
    case kernel_dsl::cutedsl: return "CuTe DSL";
    case kernel_dsl::helion: return "Helion";
  }
  return "Triton";
}

kernel_kind kind_of(kernel_dsl dsl) {
  return dsl == kernel_dsl::cuda ? kernel_kind::cu : kernel_kind::py;
}

std::string kernel_folder(const std::string& op_name) {
  return ops::op_name_to_folder_name(op_name);
}

op_brief make_op_brief(const std::string& op_name, const std::string& schema,
                       const std::vector<std::string>& inputs, size_t max_examples) {
  op_brief b;
  b.op_name = op_name;
  b.folder = kernel_folder(op_name);
  b.schema = schema;
  for (size_t i = 0; i < inputs.size() && i < max_examples; ++i)
    b.examples.push_back(inputs[i]);
  return b;
}

namespace {

std::string short_name(const std::string& op_name) {
  return op_name.rfind("aten.", 0) == 0 ? op_name.substr(5) : op_name;
}

std::string clip(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars)
    return text;
  return text.substr(0, max_chars) + "\n... (" + std::to_string(text.size() - max_chars)
         + " more characters)";
}

std::string examples_text(const op_brief& op) {
  std::string out;
  for (auto& e : op.examples)
    out += "  " + e + "\n";
  return out;
}

const char* abi_text(kernel_dsl dsl) {
  switch (dsl) {
    case kernel_dsl::triton:
      return "Write a Python module that implements the operator with Triton kernels "
             "(`import triton`, `import triton.language as tl`, `@triton.jit`). Its entry point is "
             "a Python function named ENTRY that takes the operator's arguments, positional and "
             "keyword, exactly as the aten operator does, launches the Triton kernels, and returns "
             "what the aten operator returns: same shapes, dtypes and device. Inputs are CUDA "
             "tensors; handle non-contiguous inputs.";
    case kernel_dsl::pytorch:
      return "Write a Python module that implements the operator with PyTorch tensor code. Its "
             "entry point is a Python function named ENTRY that takes the operator's arguments, "
             "positional and keyword, exactly as the aten operator does, and returns what the "
             "aten operator returns: same shapes, dtypes and device. Do not call the operator "
             "itself.";
    case kernel_dsl::cuda:
      return "Write one CUDA C++ file (.cu). Start with `#include <bbcluster/kernel.h>` (it "
             "brings ATen). Define a function named ENTRY with the operator's ATen C++ signature "
             "(Tensor -> const at::Tensor&, int -> int64_t, float -> double, Scalar -> const "
             "at::Scalar&, int[] -> at::IntArrayRef, optional -> std::optional<...>), returning "
             "at::Tensor (or a std::tuple of them), launch your __global__ kernels on "
             "c10::cuda::getCurrentCUDAStream() (include <c10/cuda/CUDAStream.h>), and end the "
             "file with `BBCLUSTER_EXPORT_KERNEL(ENTRY)`. No TORCH_LIBRARY blocks, no main().";
    case kernel_dsl::cutedsl:
      return "Write a Python module that implements the operator with NVIDIA's CuTe DSL (the "
             "nvidia-cutlass-dsl package: `import cutlass`, `import cutlass.cute as cute`, "
             "`from cutlass.cute.runtime import from_dlpack`). Define the device kernel as "
             "FOLDER_cutedsl_kernel with `@cute.kernel` and its launcher as FOLDER_kernel_launch "
             "with `@cute.jit`; compile the launcher with `cute.compile` once per shape and dtype "
             "(keep the compiled launcher in a module-level dict) and call it on tensors wrapped "
             "with `from_dlpack`. The entry point is a Python function named ENTRY that takes the "
             "operator's arguments, positional and keyword, exactly as the aten operator does, "
             "allocates the outputs with torch, launches the compiled kernel, and returns what "
             "the aten operator returns: same shapes, dtypes and device. Inputs are CUDA tensors; "
             "handle non-contiguous inputs. Do not fall back to PyTorch and do not wrap the "
             "launch in try/except.";
    case kernel_dsl::helion:
      return "Write a Python module that implements the operator with Helion (`import helion`, "
             "`import helion.language as hl`). Define the kernel as FOLDER_helion_kernel with "
             "`@helion.kernel()` (give it `config=helion.Config(...)` or a small `configs=[...]` "
             "list so it does not autotune at length on its first call); inside, iterate with "
             "`for tile in hl.tile(...)` and write PyTorch-style tensor code on the tiles (tiles "
             "are opaque: no arithmetic on them). Call it as a Python function, `out = "
             "FOLDER_helion_kernel(x, y)`, never with Triton's `kernel[grid](...)`. The entry "
             "point is a Python function named ENTRY that takes the operator's arguments, "
             "positional and keyword, exactly as the aten operator does, calls the Helion kernel "
             "and returns what the aten operator returns: same shapes, dtypes and device. Inputs "
             "are CUDA tensors. Do not fall back to PyTorch.";
  }
  return "";
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

} // namespace

std::string kernel_prompt(const op_brief& op, kernel_dsl dsl, const std::string& feedback) {
  auto entry = op.folder + "_kernel_impl";
  std::ostringstream out;
  out << "Implement the PyTorch aten operator " << short_name(op.op_name) << " as a fast "
      << dsl_title(dsl) << " kernel.\n\n"
      << "Operator: " << op.op_name << "\n"
      << "Schema: " << (op.schema.empty() ? "(unknown)" : op.schema) << "\n\n"
      << replace_all(replace_all(abi_text(dsl), "ENTRY", "`" + entry + "`"), "FOLDER", op.folder)
      << "\n\n";
  if (!op.examples.empty())
    out << "It is tested on inputs like these (args, kwargs); T(shape, dtype[, stride]) is a "
           "tensor, f32 float32, f16 float16, bf16 bfloat16, i64 int64, b8 bool:\n"
        << examples_text(op) << "\n";
  out << "Results are compared with the aten operator with atol=1e-2 and rtol=1e-2, then timed "
         "against it.\n";
  if (!feedback.empty())
    out << "\nYour previous version was evaluated:\n\n" << feedback << "\n";
  out << "\nAnswer with the complete file in one fenced code block ("
      << (dsl == kernel_dsl::cuda ? "```cuda" : "```python") << ").\n";
  return out.str();
}

bool is_correct_result(const eval_result& r) {
  if (r.outcome != outcome::ok)
    return false;
  auto s = score_result(r);
  return s.correct && !s.skipped;
}

std::string result_line(const eval_result& r) {
  if (r.outcome != outcome::ok) {
    auto first = r.detail.substr(0, r.detail.find('\n'));
    return to_string(r.outcome) + (first.empty() ? "" : ": " + clip(first, 200));
  }
  auto s = score_result(r);
  char buf[200];
  if (s.skipped)
    return "skipped: " + s.skip_reason.substr(0, s.skip_reason.find('\n'));
  if (s.correct) {
    std::snprintf(buf, sizeof(buf), "correct, speedup %.2fx", s.performance);
    return buf;
  }
  double max_abs = 0.0;
  for (auto& c : r.correctness)
    if (!c.is_correct)
      max_abs = std::max(max_abs, c.max_abs_error);
  std::snprintf(buf, sizeof(buf), "incorrect: %zu/%zu inputs correct (max abs error %.3g)",
                s.passed_inputs, s.correctness_inputs, max_abs);
  return buf;
}

std::string describe_for_feedback(const eval_result& r, const std::string& code, double p,
                                  size_t max_items) {
  std::ostringstream out;
  if (!code.empty())
    out << "Its code:\n```\n" << clip(code, 12000) << "\n```\n\n";
  if (r.outcome == outcome::compile_failed) {
    out << "It did not build. The compiler said:\n" << clip(r.detail, 6000)
        << "\n\nFix the build errors.\n";
    return out.str();
  }
  if (r.outcome == outcome::no_kernel) {
    out << "There was no kernel to evaluate: " << clip(r.detail, 2000) << "\n";
    return out.str();
  }
  if (r.outcome != outcome::ok) {
    out << "The evaluation failed as a whole: " << to_string(r.outcome);
    if (!r.detail.empty())
      out << ": " << clip(r.detail, 4000);
    out << "\n(crashed: the process died, e.g. a segmentation fault; timed_out: it did not "
           "finish; cuda_error: an illegal memory access or launch error.)\n";
    return out.str();
  }
  size_t failed = 0;
  for (auto& c : r.correctness) {
    if (c.is_correct || is_unscorable(c))
      continue;
    if (++failed > max_items)
      continue;
    out << "Incorrect on input " << c.args << "\n";
    if (!c.error_type.empty() || !c.error_msg.empty())
      out << "  error: " << c.error_type << (c.error_msg.empty() ? "" : ": ")
          << clip(c.error_msg, 1500) << "\n";
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  max absolute error %.6g, max relative error %.6g\n",
                  c.max_abs_error, c.max_rel_error);
    out << buf;
    if (!c.traceback.empty())
      out << "  traceback:\n" << clip(c.traceback, 1500) << "\n";
  }
  if (failed > max_items)
    out << "... and " << failed - max_items << " more incorrect inputs.\n";
  for (auto& f : r.flags)
    out << "It was flagged: " << f
        << " (kernels must not modify their inputs, return an input, use their own CUDA "
           "stream or replace the timer).\n";
  auto s = score_result(r);
  if (!r.performance.empty()) {
    out << (failed ? "\n" : "") << "Timings against aten:\n";
    size_t listed = 0;
    for (auto& perf : r.performance) {
      if (++listed > max_items)
        break;
      char buf[256];
      if (perf.successfully_ran)
        std::snprintf(buf, sizeof(buf), "  %.4f ms vs aten %.4f ms (speedup %.2fx) on ",
                      perf.benchmark_time_ms, perf.reference_time_ms, perf.speedup);
      else
        std::snprintf(buf, sizeof(buf), "  did not run: %s, on ",
                      clip(perf.error_msg, 200).c_str());
      out << buf << perf.args << "\n";
    }
    char buf[128];
    std::snprintf(buf, sizeof(buf), "  geometric mean speedup %.2fx\n", s.performance);
    out << buf;
  }
  if (failed > 0)
    out << "\nMake it correct on every input.\n";
  else if (s.correct && s.performance <= p)
    out << "\nIt is correct but not faster than aten (speedup " << s.performance
        << "x, goal above " << p << "x). Make it faster and keep it correct.\n";
  return out.str();
}

extracted_code extract_code(const std::string& reply, kernel_dsl dsl) {
  struct block {
    std::string tag, code;
  };
  std::vector<block> blocks;
  bool unclosed = false;
  size_t pos = 0;
  while (pos < reply.size()) {
    size_t line_end = reply.find('\n', pos);
    if (line_end == std::string::npos)
      line_end = reply.size();
    auto line = reply.substr(pos, line_end - pos);
    auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos
        && (line.compare(first, 3, "```") == 0 || line.compare(first, 3, "~~~") == 0)) {
      auto fence = line.substr(first, 3);
      auto tag = line.substr(first + 3);
      tag.erase(0, tag.find_first_not_of(" \t`~"));
      tag.erase(tag.find_last_not_of(" \t\r") + 1);
      std::transform(tag.begin(), tag.end(), tag.begin(), ::tolower);
      size_t body = line_end + 1;
      size_t close = std::string::npos;
      for (size_t p = body; p < reply.size();) {
        size_t e = reply.find('\n', p);
        if (e == std::string::npos)
          e = reply.size();
        auto l = reply.substr(p, e - p);
        auto f = l.find_first_not_of(" \t");
        if (f != std::string::npos && l.compare(f, 3, fence) == 0
            && l.find_first_not_of(" \t\r" + fence.substr(0, 1), f) == std::string::npos) {
          close = p;
          pos = e + 1;
          break;
        }
        p = e + 1;
      }
      if (close == std::string::npos) {
        unclosed = true;
        break;
      }
      auto code = body < close ? reply.substr(body, close - body) : std::string();
      blocks.push_back({tag, code});
      continue;
    }
    pos = line_end + 1;
  }
  if (blocks.empty())
    return {"", unclosed ? "the reply's code block is not closed (a reply cut short?)"
                         : "the reply has no fenced code block (```)"};
  std::vector<std::string> wanted = dsl == kernel_dsl::cuda
                                      ? std::vector<std::string>{"cuda", "cu", "cpp", "c++"}
                                      : std::vector<std::string>{"python", "py", "python3"};
  for (auto& b : blocks)
    if (std::find(wanted.begin(), wanted.end(), b.tag) != wanted.end())
      return {b.code, ""};
  for (auto& b : blocks)
    if (b.tag.empty())
      return {b.code, ""};
  return {blocks.front().code, ""};
}

std::string expose_entry_point(const std::string& code, const std::string& folder) {
  auto entry = folder + "_kernel_impl";
  std::regex has_entry("(^|\\n)\\s*(async\\s+)?def\\s+" + entry + "\\s*\\(|(^|\\n)" + entry + "\\s*=");
  if (std::regex_search(code, has_entry))
    return code;
  std::regex has_agent_entry("(^|\\n)def\\s+kernel_function\\s*\\(");
  if (!std::regex_search(code, has_agent_entry))
    return code;
  auto out = code;
  if (!out.empty() && out.back() != '\n')
    out += '\n';
  out += "\n\n# The entry point bbcluster and BackendBench call: KernelAgent's kernel_function.\n"
         + entry + " = kernel_function\n";
  return out;
}

std::string agent_problem_description(const op_brief& op, const std::string& feedback) {
  std::ostringstream out;
  out << "Implement a high-performance Triton kernel for the PyTorch operator "
      << short_name(op.op_name) << ".\n\n"
      << "Operator: " << op.op_name << "\n"
      << "Schema: " << (op.schema.empty() ? "(unknown)" : op.schema) << "\n\n"
      << "Write a function `kernel_function` that takes the operator's arguments, positional "
         "and keyword, exactly as the aten operator does, launches Triton kernels, and returns "
         "what the aten operator returns: same shapes, dtypes and device, within atol=1e-2 and "
         "rtol=1e-2. It must not call the operator itself.\n";
  if (!op.examples.empty())
    out << "\nThe test inputs (args, kwargs; T(shape, dtype[, stride]) is a tensor):\n"
        << examples_text(op);
  if (!feedback.empty())
    out << "\nA previous kernel was evaluated by the benchmark:\n\n" << feedback;
  return out.str();
}

namespace {

// A text as lines of Python comments, each after `prefix` ("# ", "#       "), at most
// `max_chars` of it.
std::string as_comment(const std::string& text, const std::string& prefix, size_t max_chars) {
  std::string out;
  std::istringstream lines(clip(text, max_chars));
  for (std::string line; std::getline(lines, line);)
    out += (line.empty() ? std::string("#") : prefix + line) + "\n";
  return out;
}

// A Python string literal holding `text`.
std::string py_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\')
      out += std::string("\\") + static_cast<char>(ch);
    else if (ch == '\n')
      out += "\\n";
    else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", ch);
      out += buf;
    } else
      out += static_cast<char>(ch);
  }
  return out + "\"";
}

// What the benchmark saw on one input the previous kernel got wrong, in one line.
std::string observed_line(const correctness_record& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "max absolute error %.6g, max relative error %.6g",
                c.max_abs_error, c.max_rel_error);
  std::string out = buf;
  if (!c.error_type.empty() || !c.error_msg.empty()) {
    auto msg = c.error_msg.substr(0, c.error_msg.find('\n'));
    out += "; " + c.error_type + (msg.empty() ? "" : ": " + clip(msg, 300));
  }
  return out;
}

// The test's account of the previous version's evaluation, for the model that reads the test
// in KernelAgent's kernel prompts (the problem description does not reach them), and the
// inputs that version got wrong, checked first.
void previous_evaluation(std::ostringstream& out, const eval_result& previous,
                         std::vector<const correctness_record*>& failed) {
  auto v = std::to_string(previous.version);
  if (previous.outcome != outcome::ok) {
    out << "#\n# The previous attempt (version " << v << ") failed as a whole: "
        << to_string(previous.outcome) << ". What the benchmark said:\n"
        << as_comment(previous.detail, "# ", 3000);
    return;
  }
  for (auto& c : previous.correctness)
    if (!c.is_correct && !is_unscorable(c) && failed.size() < 5)
      failed.push_back(&c);
  if (!failed.empty()) {
    out << "#\n# The benchmark evaluated the previous kernel (version " << v
        << ") and it was wrong.\n# The inputs it got wrong are checked first, in "
           "PREVIOUSLY_FAILED, each with what the\n# benchmark saw on it:\n";
    for (auto* c : failed) {
      out << "#   " << c->args << "\n#     " << observed_line(*c) << "\n";
      if (!c->traceback.empty())
        out << as_comment(c->traceback, "#       ", 800);
    }
  } else if (is_correct_result(previous)) {
    auto s = score_result(previous);
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "#\n# The previous kernel (version %s) was correct, with a geometric mean "
                  "speedup of %.2fx over aten: keep it correct and make it faster.\n",
                  v.c_str(), s.performance);
    out << buf;
  }
  for (auto& f : previous.flags)
    out << "# The benchmark also flagged it: " << f
        << " (a kernel must not modify its inputs, return an input, use its own CUDA stream "
           "or replace the timer).\n";
}

} // namespace

namespace {

// The test's main: its own cases, or the service's verdict.
const char* local_main = R"PY(

if __name__ == "__main__":
    sys.exit(0 if test_kernel() else 1)
)PY";

const char* service_check = R"PY(

def test_on_service():
    """kernel.py, evaluated by the bbcluster service on the operator's inputs. KernelAgent ends
    a test run after 30 s: the request is given up (and cancelled on the server) before."""
    import os
    sys.path.insert(0, SERVICE["client_path"])
    try:
        from bbcluster_client import BBClusterError, Client, Kernel
    except ImportError as e:
        print(f"bbcluster service error: cannot use it from {sys.executable}: {e} "
              "(it needs pyzmq and msgpack: pip install pyzmq msgpack)", file=sys.stderr)
        sys.exit(3)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.py")) as f:
        kernel = Kernel("py", f.read(), name="kernel.py", entry="kernel_function")
    try:
        with Client(SERVICE["address"], keys=SERVICE["keys"] or None,
                    name=f"kernel_agent-{os.getpid()}") as client:
            result = client.evaluate(SERVICE["op"], kernel, suite=SERVICE["suite"],
                                     data=SERVICE["data"] or None, topn=SERVICE["topn"] or None,
                                     timeout=SERVICE["timeout_s"])
    except BBClusterError as e:
        # Not the kernel's fault: said apart, with its own exit status.
        print(f"bbcluster service error: the kernel was not evaluated: {e}", file=sys.stderr)
        sys.exit(3)
    for number, c in enumerate(result.correctness, 1):
        if c.is_correct:
            print(f"input {number} passed")
        else:
            print(f"input {number} failed: {c.args}: {c.error_type}: {c.error_msg}")
            if c.traceback:
                print(c.traceback[-1500:])
    if result.raw.get("flags"):
        print("the benchmark flagged it: " + ", ".join(result.raw["flags"]))
    print("all inputs passed" if result.correct else
          f"failed ({result.raw.get('outcome', '')}: {result.raw.get('detail', '')})")
    return result.correct


if __name__ == "__main__":
    sys.exit(0 if test_on_service() else 1)
)PY";

} // namespace

namespace {

// The test without its main.
std::string agent_test_body(const op_brief& op, const eval_result& previous) {
  auto names = ops::to_schema_name(op.op_name);
  auto dispatcher = names.name.substr(names.name.find("::") + 2);
  auto overload = names.overload.empty() ? std::string("default") : names.overload;
  std::vector<const correctness_record*> failed;
  std::ostringstream out;
  out << "# Test of a kernel for " << op.op_name << ", written by bbcluster from the suite's "
      << "inputs.\n#\n"
      << "# Operator: " << op.op_name << "\n"
      << "# Schema: " << (op.schema.empty() ? "(unknown)" : op.schema) << "\n"
      << "# kernel_function takes the operator's arguments, positional and keyword, exactly as "
         "the aten\n# operator does and returns what it returns (same shapes, dtypes and "
         "device), within\n# atol=1e-2 and rtol=1e-2, without calling the operator itself. "
         "Inputs are uniform [0, 1) floats\n# (integers in [-9, 9]); T(shape, dtype[, stride]) "
         "is such a tensor.\n";
  if (previous.version > 0)
    previous_evaluation(out, previous, failed);
  out << R"PY(
import math
import sys

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
c32, c64, c128 = torch.complex32, torch.complex64, torch.complex128
i8, i16, i32, i64, b8, u8 = torch.int8, torch.int16, torch.int32, torch.int64, torch.bool, torch.uint8
inf, nan = math.inf, math.nan


def _random(numel, dtype):
    if dtype.is_floating_point:
        return torch.rand(numel, dtype=torch.float32).to(dtype)
    if dtype.is_complex:
        real = torch.complex64 if dtype != torch.complex128 else torch.complex128
        return torch.complex(torch.rand(numel), torch.rand(numel)).to(real).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,)).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 10, (numel,), dtype=dtype)
    return torch.randint(-9, 10, (numel,), dtype=dtype)


def T(size, dtype, stride=None):
    size = list(size)
    if stride is None:
        return _random(math.prod(size), dtype).reshape(size).to(DEVICE)
    stride = list(stride)
    numel = 0 if 0 in size else 1 + sum((s - 1) * st for s, st in zip(size, stride))
    return _random(numel, dtype).to(DEVICE).as_strided(size, stride)


def _on_device(value):
    if isinstance(value, torch.device) or value in ("cuda", "cpu"):
        return torch.device(DEVICE)
    return value


def _build(text, seed):
    torch.manual_seed(seed)
    args, kwargs = eval(text)
    if "device" in kwargs:
        kwargs["device"] = _on_device(kwargs["device"])
    return list(args), kwargs


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _compare(ref, res):
    if isinstance(ref, (list, tuple)):
        assert isinstance(res, (list, tuple)) and len(ref) == len(res), "result length differs"
        for a, b in zip(ref, res):
            _compare(a, b)
    elif isinstance(ref, torch.Tensor):
        torch.testing.assert_close(res, ref, atol=1e-2, rtol=1e-2, equal_nan=True)
    else:
        assert ref == res, f"expected {ref!r}, got {res!r}"


# (input, what the benchmark saw on it with the previous kernel)
PREVIOUSLY_FAILED = [
)PY";
  for (auto* c : failed)
    out << "    (r\"\"\"" << c->args << "\"\"\", " << py_string(observed_line(*c)) << "),\n";
  out << R"PY(]
CASES = [
)PY";
  for (auto& e : op.examples)
    out << "    " << "r\"\"\"" << e << "\"\"\",\n";
  out << R"PY(]
OP = torch.ops.aten.)PY" << dispatcher << "." << overload << R"PY(


def _check(kernel_function, name, text, seed):
    try:
        args, kwargs = _build(text, seed)
        ref = OP(*_clone(args), **_clone(kwargs))
        res = kernel_function(*_clone(args), **_clone(kwargs))
        _compare(ref, res)
        print(f"{name} passed")
        return True
    except Exception as e:
        print(f"{name} failed: {text}: {type(e).__name__}: {e}")
        return False


def test_kernel():
    from kernel import kernel_function

    failed = []
    for number, (text, observed) in enumerate(PREVIOUSLY_FAILED, 1):
        if not _check(kernel_function, f"previously failed case {number}", text, number):
            print(f"  (the previous kernel, on this input: {observed})")
            failed.append(f"previously failed case {number}")
    for number, text in enumerate(CASES, 1):
        if not _check(kernel_function, f"case {number}", text, number):
            failed.append(f"case {number}")
    print("all cases passed" if not failed else f"failed: {', '.join(failed)}")
    return not failed
)PY";
  return out.str();
}

} // namespace

std::string agent_test_code(const op_brief& op, const eval_result& previous) {
  return agent_test_body(op, previous) + local_main;
}

std::string agent_test_code(const op_brief& op, const eval_result& previous, const agent_service& service) {
  if (service.address.empty())
    return agent_test_code(op, previous);
  std::ostringstream out;
  out << agent_test_body(op, previous) << "\n\n# Where this test's run sends kernel.py: the bbcluster service.\n"
      << "SERVICE = {\n"
      << "    \"address\": " << py_string(service.address) << ",\n"
      << "    \"keys\": " << py_string(service.keys) << ",\n"
      << "    \"client_path\": " << py_string(service.client_path) << ",\n"
      << "    \"op\": " << py_string(op.op_name) << ",\n"
      << "    \"suite\": " << py_string(service.suite) << ",\n"
      << "    \"data\": " << py_string(service.data) << ",\n"
      << "    \"topn\": " << service.topn << ",\n"
      << "    \"timeout_s\": 25,\n"
      << "}\n"
      << service_check;
  return out.str();
}

void version_history::record(eval_result r) {
  versions_.push_back(std::move(r));
}

bool version_history::wants_another(const version_policy& policy) const {
  if (versions_.empty())
    return true;
  if (versions_.size() >= policy.max_versions)
    return false;
  // A version that cannot be scored here (a .cu on a node without a GPU, an operator this
  // torch lacks) would not score in another version either.
  if (score_result(versions_.back()).skipped)
    return false;
  bool any_correct = false;
  bool any_fast = false;
  for (auto& v : versions_) {
    if (!is_correct_result(v))
      continue;
    any_correct = true;
    any_fast = any_fast || score_result(v).performance > policy.p;
  }
  if (!any_correct)
    return true;
  return policy.improve_when_slow && !any_fast;
}

const eval_result& version_history::standing() const {
  const eval_result* best = nullptr;
  double best_perf = 0.0;
  for (auto& v : versions_) {
    if (!is_correct_result(v))
      continue;
    auto perf = score_result(v).performance;
    if (!best || perf > best_perf) {
      best = &v;
      best_perf = perf;
    }
  }
  return best ? *best : versions_.back();
}

} // namespace bb
