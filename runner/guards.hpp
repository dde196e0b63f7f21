#pragma once

// Checks against reward hacking (docs/architecture.md, "Checks against reward hacking"): what
// the runner does around a kernel's calls so that no kernel earns a verdict or a speedup it
// did not compute. Fresh inputs for every timed call, outputs poisoned once used, extra inputs
// with signed and special values, and tamper checks of the process state the evaluation
// relies on (the dispatcher, dispatch modes, global settings, output types).

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include "runner/inputs.hpp"
#include "runner/kernel.hpp"

namespace bb::runner {

/// Calls `f` with every defined tensor of `v` or `call` (nested lists and tuples included), a
/// sparse one as its indices and values.
void each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& f);
void each_tensor(const built_call& call, const std::function<void(const at::Tensor&)>& f);

/// Refills every floating-point (and complex) tensor of `call` in place, over its whole
/// storage, with make_tensor's distribution (uniform in [0, 1)) drawn from `seed`: the same
/// kinds of values as the input's own, but ones no earlier call has seen. Integer and bool
/// tensors (indices, masks) keep their values, except in a call that has no floating-point
/// tensor, where their elements are put in an order drawn from `seed`.
void refresh_floats(built_call& call, uint64_t seed, const at::Device& device);

/// refresh_floats for one call refreshed again and again (the timed calls): what to refill
/// and with which generator is found once, so that a refresh allocates nothing and makes no
/// generator (found again when a tensor of the call was given another storage or its storage
/// resized). The same values as refresh_floats from the same seed. `call` must outlive the
/// refresher.
class input_refresher {
public:
  input_refresher() = default;
  input_refresher(const built_call& call, const at::Device& device);
  void refresh(uint64_t seed);

private:
  struct part {
    at::Tensor source;    // the call's tensor
    c10::StorageImpl* storage = nullptr; // its storage, and that storage's size, when found
    size_t nbytes = 0;
    at::Tensor whole;     // the storage, whole (undefined: nothing to refill)
    bool floating = true; // refilled; else reordered (a call without floating-point tensors)
    at::Tensor order, reordered;
  };
  void find_parts();
  bool storages_moved() const;
  const built_call* call_ = nullptr; // outlives the refresher
  std::vector<part> parts_;
  at::Device device_ = at::kCPU;
  std::optional<at::Generator> generator_;
};

/// The content seed of one call: the same for both sides of a timing, different for every
/// call of either measurement (`measurement`: 0 the first, 1 an outlier's measurement again),
/// warm-up calls (`timed` false) apart from timed ones. A checked call (`checked_rank` 0 or 1,
/// its number among its round's checked calls; -1 for others) takes a seed of its round and
/// rank alone, so that both sides' checked calls see the same values wherever they fall in the
/// round (the same work on both sides). A secret of the
/// process, drawn from the operating system's entropy, is mixed in: no kernel can compute the
/// values of a timed call ahead of it.
uint64_t call_seed(uint64_t input_seed, uint64_t measurement, int64_t round, int64_t index,
                   bool timed, int checked_rank);

/// Where the copies of the checked call with number `n` in its measurement (its round times
/// checked_per_round plus its rank)
/// are kept among `slots`: slot n while n < slots, then a slot drawn as reservoir sampling
/// draws it, or none (-1). Drawn from the process's secret, so that no kernel can tell which
/// (the reference's checked calls copy as much, into slots that hold no answer).
int64_t checked_slot(uint64_t n, size_t slots, uint64_t measurement);

/// Fills the storages of `value`'s tensors with the canary (every bit set: NaN for floating
/// point, -1 for integers, true for bool) unless they share memory with a tensor of `keep`:
/// an output once used, so that memory a later call returns without writing it reads as NaN.
void poison_outputs(const c10::IValue& value, const built_call& keep);

/// The floating-point and complex outputs in `value` that are tensors of `among` (an in-place
/// operator's answer is its input buffer) filled with NaN, their elements only: what is kept
/// there would otherwise hold the answer until the buffer's next refresh.
void poison_answers_among(const c10::IValue& value, const built_call& among);

/// The extra inputs of a correctness input (checks.extra_inputs): its floating-point tensors
/// made signed ("signed values": uniform in [-3, 3)), and signed with zeros, +inf, -inf and
/// NaN at fixed places ("special values").
struct variant {
  std::string name;
  built_call call;
};
std::vector<variant> extra_inputs(const built_call& call, uint64_t seed, const at::Device& device);

/// Whether `value` holds a non-empty integer tensor (indices, counts; bool is not one).
bool has_integer_tensors(const c10::IValue& value);

/// Whether `call` has a floating-point tensor an extra input would change.
bool has_float_tensors(const built_call& call);

/// Why `value` is not made of plain dense (or sparse COO) tensors of torch's own types, or of
/// the kinds of tensor `reference` (the operator's own output) is made of: "" when it is. A
/// tensor subclass, a wrapper (functional, fake), a meta tensor or one with Python dispatch is
/// not.
std::string not_plain(const c10::IValue& value, const c10::IValue& reference = {});

/// Whether two values share a tensor storage.
bool shares_storage(const c10::IValue& a, const c10::IValue& b);

/// The dispatcher's tables of the operators the evaluation relies on (those of inputs,
/// comparison and checks, functional overloads), and of the operator evaluated, as a
/// fingerprint per operator.
class dispatcher_fingerprint {
public:
  /// The operators the evaluation relies on, as they are now (tens of microseconds).
  dispatcher_fingerprint();
  /// These and `op`'s own table.
  dispatcher_fingerprint with(const c10::OperatorHandle& op) const;
  /// The operators whose table changed since construction ("aten::add.Tensor").
  std::vector<std::string> changed() const;

  /// Which kernel each key of an operator's computed table runs (guards.cpp).
  struct table;

private:
  // By full name ("aten::add.Tensor"); the table shared, since a runner's baseline is copied
  // for every job.
  struct seen {
    c10::OperatorName name;
    std::shared_ptr<const table> kernels;
  };
  std::map<std::string, seen> tables_;
};

/// Process-wide state a kernel could change to slow the reference or to bend the evaluation:
/// intra-op threads, the CPUs each thread may run on, grad mode, TF32 and reduced-precision
/// flags, deterministic algorithms, the current CUDA stream, the dispatch mode stack and the
/// thread's dispatch keys.
class process_state {
public:
  /// `device`: "cpu" or "cuda", the runner's device.
  explicit process_state(std::string device);
  /// What differs from the state at construction, each as "NAME: BEFORE -> NOW", split into
  /// dispatch changes (a mode or key set) and global ones.
  struct changes {
    std::vector<std::string> dispatch;
    std::vector<std::string> global;
  };
  changes compare() const;
  /// Puts the state at construction back: pops dispatch modes left on, the thread's dispatch
  /// keys, threads, grad mode, the context's flags and the current CUDA stream (the matmul
  /// precision and cuBLAS reduction options are reported, not restored: the runner is
  /// replaced after a job that changed anything).
  void restore() const;

private:
  std::map<std::string, std::string> read() const;
  std::map<std::string, std::string> values_;
  c10::impl::LocalDispatchKeySet keys_;
  int64_t threads_ = 0;
  bool grad_ = false;
  std::string device_;
  /// The CPUs each thread of the process may run on (a cpu_set_t's bytes), by thread id, at
  /// construction; a thread started later is held to `cpus_` (what the constructing thread
  /// may run on), unless OpenMP was told to bind its workers (`hold_new_threads_` false).
  std::map<long, std::string> affinity_;
  std::string cpus_;
  bool hold_new_threads_ = true;
};

/// The CPUs each thread of this process may run on, as a cpu_set_t's bytes, by thread id
/// (/proc/self/task); a thread whose mask cannot be read (it ended meanwhile) is left out.
std::map<long, std::string> thread_affinities();

/// On CUDA: fills the free blocks of the caching allocator with the canary, so that memory a
/// kernel allocates and returns without writing reads as NaN even on its first call. Of each
/// free block the first `prefix_bytes` (all of it for 0): the allocator splits a block from its
/// start, so what a call's allocations take of a block lies at its start. Nothing on a CPU.
void poison_free_device_memory(const std::string& device, size_t prefix_bytes = 0);

/// Device memory in use (allocated through the caching allocator, not merely cached) beyond
/// `limit` bytes on CUDA, as a text for the log; "" when within it, and on a CPU. Between jobs
/// the runner itself holds little (workspaces, the L2 flush buffer): more is what a kernel
/// keeps alive past its job, which would starve the next job's reference and kernel.
std::string device_memory_held(const std::string& device, int64_t limit);

/// How much of each free block the outputs like `like`, and the temporaries made before them,
/// can take: four times their bytes, at least 8 MiB.
size_t poison_prefix_for(const c10::IValue& like);

/// The memory the next outputs like `like` will likely take, filled with the canary: on CUDA
/// the free blocks' first poison_prefix_for(like) bytes; on a CPU, blocks of each of `like`'s
/// tensors' sizes, allocated, filled and freed (the heap hands a freed block of a size out
/// again first).
void poison_memory_for(const c10::IValue& like, const std::string& device);

} // namespace bb::runner
