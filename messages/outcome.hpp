#pragma once

// How a job, or one input of a job, ended: the closed set of outcomes and the rules that go
// with each, in one place (docs/architecture.md, "Outcomes"). Torch- and CAF-free; on the
// wire (msgpack) and in the journal an outcome is its name.

#include <cstdint>
#include <optional>
#include <string>

#include <msgpack.hpp>

namespace bb {

enum class outcome : uint8_t {
  /// The runner evaluated every input; each input carries its own verdict.
  ok,
  /// Some output did not match the reference (an input's verdict).
  incorrect,
  /// The kernel raised, or could not be loaded.
  exception,
  /// A native kernel did not build.
  compile_failed,
  /// The runner died while running kernel code (a signal, an exit).
  crashed,
  /// One call or the whole job ran past its timeout.
  timed_out,
  /// The CUDA context was lost: the runner that saw it must not run another job.
  cuda_error,
  /// The kernel ran out of memory.
  oom,
  /// The reference (aten) itself failed, crashed, timed out or disagreed with itself on an
  /// input: the input is left out, as BackendBench leaves out inputs whose reference fails.
  /// Never the kernel's failure.
  reference_error,
  /// The operator or an input's layout cannot be evaluated by this torch.
  unsupported,
  /// A CUDA kernel on a node without a GPU (or without nvcc): not evaluated here.
  needs_cuda,
  /// The infrastructure failed (a node or an evaluator lost, bbrunner's own fault), not the
  /// kernel.
  infra_error,
  /// A generative backend produced no kernel for this attempt (no code in the reply, the
  /// agent failed, the request failed): counts as a failed operator.
  no_kernel,
};

inline constexpr outcome last_outcome = outcome::no_kernel;

inline const char* to_string(outcome x) {
  switch (x) {
    case outcome::ok: return "ok";
    case outcome::incorrect: return "incorrect";
    case outcome::exception: return "exception";
    case outcome::compile_failed: return "compile_failed";
    case outcome::crashed: return "crashed";
    case outcome::timed_out: return "timed_out";
    case outcome::cuda_error: return "cuda_error";
    case outcome::oom: return "oom";
    case outcome::reference_error: return "reference_error";
    case outcome::unsupported: return "unsupported";
    case outcome::needs_cuda: return "needs_cuda";
    case outcome::infra_error: return "infra_error";
    case outcome::no_kernel: return "no_kernel";
  }
  return "unknown";
}

inline bool from_string(const std::string& s, outcome& x) {
  for (int i = 0; i <= static_cast<int>(last_outcome); ++i) {
    auto candidate = static_cast<outcome>(i);
    if (s == to_string(candidate)) {
      x = candidate;
      return true;
    }
  }
  return false;
}

/// The outcome named at the start of `text` ("reference_error: ..."), if any.
inline std::optional<outcome> outcome_prefix(const std::string& text) {
  auto end = text.find(':');
  outcome x;
  if (from_string(text.substr(0, end), x))
    return x;
  return std::nullopt;
}

/// A fault of the runner or the infrastructure rather than a verdict on the kernel's
/// results: worth running the job again on a fresh runner.
inline bool is_retryable(outcome x) {
  return x == outcome::crashed || x == outcome::timed_out || x == outcome::infra_error;
}

/// Not the kernel's doing at all: retried without counting against the kernel's attempts.
inline bool is_infrastructure(outcome x) {
  return x == outcome::infra_error;
}

/// Leaves the input (or, for a whole job, the operator) out of the scores: nothing can be
/// said about the kernel there.
inline bool is_skipped(outcome x) {
  return x == outcome::reference_error || x == outcome::unsupported || x == outcome::needs_cuda;
}

/// The runner that saw it cannot be trusted with another job and is replaced.
inline bool spoils_runner(outcome x) {
  return x == outcome::cuda_error;
}

/// A job that ended this way did not evaluate its inputs and counts as a failed operator.
inline bool fails_job(outcome x) {
  return x != outcome::ok && !is_skipped(x);
}

} // namespace bb

// msgpack: an outcome travels as its name, so a peer reads it whatever the enum's order.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <>
struct convert<bb::outcome> {
  msgpack::object const& operator()(msgpack::object const& o, bb::outcome& v) const {
    if (o.type != msgpack::type::STR)
      throw msgpack::type_error();
    if (!bb::from_string(std::string(o.via.str.ptr, o.via.str.size), v))
      throw msgpack::type_error();
    return o;
  }
};

template <>
struct pack<bb::outcome> {
  template <typename Stream>
  msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o, bb::outcome const& v) const {
    o.pack(std::string(bb::to_string(v)));
    return o;
  }
};

template <>
struct object_with_zone<bb::outcome> {
  void operator()(msgpack::object::with_zone& o, bb::outcome const& v) const {
    static_cast<msgpack::object&>(o) = msgpack::object(std::string(bb::to_string(v)), o.zone);
  }
};

} // namespace adaptor
} // MSGPACK_API_VERSION_NAMESPACE
} // namespace msgpack
