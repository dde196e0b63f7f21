#pragma once

// The generative layer's plain logic, shared by the llm and kernel_agent backends: what an
// author is told about an operator (prompt, KernelAgent's problem and test code), what the
// evaluation of one version says to the author of the next (feedback), how code is taken
// from a reply, and which version of an operator stands. No actors, no I/O.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/authoring.hpp"
#include "messages/records.hpp"

namespace bb {

/// The language's name as prompts give it: "Triton", "CuTe DSL", ...
const char* dsl_title(kernel_dsl dsl);

/// The artefact kind a DSL's kernels are written as: py, or cu for cuda.
kernel_kind kind_of(kernel_dsl dsl);

/// The folder and entry prefix of an operator: "aten.add.Tensor" -> "add__Tensor".
std::string kernel_folder(const std::string& op_name);

/// Everything an author is told about one operator, with at most `max_examples` inputs.
op_brief make_op_brief(const std::string& op_name, const std::string& schema,
                       const std::vector<std::string>& inputs, size_t max_examples = 5);

/// The prompt for one version: the operator, its schema and example inputs, the entry point
/// and ABI for `dsl`, and, from v2 on, the previous version's code and its evaluation.
std::string kernel_prompt(const op_brief& op, kernel_dsl dsl, const std::string& feedback);

/// The evaluation of one version written for the author of the next: why it failed as a
/// whole (build error, no kernel, crash), the inputs it got wrong with their errors and max
/// errors, honesty flags, and its timings against aten. `code` is the version's source,
/// quoted so a stateless author sees what it wrote. At most `max_items` inputs are listed.
std::string describe_for_feedback(const eval_result& r, const std::string& code, double p,
                                  size_t max_items = 5);

/// Code taken from a model's reply.
struct extracted_code {
  std::string code;
  /// Why there is none: no fenced block, an unclosed block.
  std::string why;
};

/// The code of a reply's fenced block (``` or ~~~): the first whose language tag fits `dsl`,
/// else the first untagged one, else the first.
extracted_code extract_code(const std::string& reply, kernel_dsl dsl);

/// Makes `<folder>_kernel_impl` the entry point of Python code that defines only
/// KernelAgent's `kernel_function` (an alias is appended); other code is returned unchanged.
std::string expose_entry_point(const std::string& code, const std::string& folder);

/// KernelAgent's problem description for one operator, with the feedback from v2 on.
std::string agent_problem_description(const op_brief& op, const std::string& feedback);

/// KernelAgent's test code for one operator: a Python program that builds the suite's
/// example inputs as the evaluator does (uniform [0, 1) floats, strided views), runs
/// `kernel.kernel_function` and the aten operator on clones, and compares them as
/// torch.testing.assert_close(atol=1e-2, rtol=1e-2) does; exit status 0 when all pass.
/// KernelAgent shows the test, not the problem description, to the model that writes and
/// refines kernels, so the test's comments say what the operator is and, from v2 on, how
/// `previous` (version 0: none) fared; the inputs it got wrong (at most five) are checked
/// first, each with the errors the benchmark saw.
std::string agent_test_code(const op_brief& op, const eval_result& previous = {});

/// A running `bbcluster serve` that KernelAgent's test run sends each candidate to, instead of
/// checking it in the agent's worker (kernel_agent.verify_with).
struct agent_service {
  /// Its address (tcp://host:port); "" for none.
  std::string address;
  /// The folder `bbcluster keygen` made, for a server with CURVE keys; "" for none.
  std::string keys;
  /// The folder that holds the Python client package (bbcluster_client).
  std::string client_path;
  /// The operator's inputs as the sweep selects them: its suite, data and topn.
  std::string suite = "torchbench";
  std::string data;
  int64_t topn = 0;
};

/// agent_test_code's test whose run sends kernel.py (its kernel_function as the operator's
/// entry point) to `service` and passes when the service finds it correct on every input,
/// printing what it found wrong on each failing input; the local cases stay in the file, for
/// the model that reads it.
std::string agent_test_code(const op_brief& op, const eval_result& previous, const agent_service& service);

/// How many versions an operator may have, and whether a correct but slow one gets another.
struct version_policy {
  uint32_t max_versions = 5;
  /// Ask for a faster version when the best correct one is not faster than `p`.
  bool improve_when_slow = false;
  double p = 1.0;
};

/// The evaluated versions of one operator, and what they decide.
class version_history {
public:
  void record(eval_result r);

  /// Whether to ask for another version: the latest failed (or, with improve_when_slow, no
  /// correct version beats p yet) and versions remain. Not after a version that cannot be
  /// scored here (needs_cuda, unsupported): another would not score either.
  bool wants_another(const version_policy& policy) const;

  /// The version that stands: the fastest correct one, else the latest.
  const eval_result& standing() const;

  const std::vector<eval_result>& versions() const {
    return versions_;
  }

private:
  std::vector<eval_result> versions_;
};

/// Whether every scorable correctness input of a result passed (and the job ran at all).
bool is_correct_result(const eval_result& r);

/// One line about a result: "correct, speedup 1.23x", "incorrect: 2/5 inputs correct (max
/// abs error 0.5)", "compile_failed: ...".
std::string result_line(const eval_result& r);

} // namespace bb
