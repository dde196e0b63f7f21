#include "runner/stream_watch.hpp"

#ifdef BB_WITH_CUPTI
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include <map>
#include <set>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <c10/cuda/CUDAStream.h>
#include <cupti.h> // with the parameters of every runtime and driver call
#endif

namespace bb::runner {

#ifdef BB_WITH_CUPTI
namespace {

// The four CUPTI functions the watch uses, from the libcupti found when bbrunner was built
// (the one beside this torch's CUDA runtime) or, failing that, the loader's.
struct cupti_api {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableCallback) enable = nullptr;
  decltype(&cuptiGetCallbackState) state = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::string why; // empty: usable
};

// A call the watch looks at, and where its stream is in the call's parameters; `per_thread`:
// the _ptsz form, where stream 0 is the calling thread's default stream, not the legacy one.
// What a watched call does: puts work on a stream (launch; a graph launch also may record any
// event again), records an event on one (record), makes one wait for an event (wait),
// destroys an event or a stream, or starts capturing a stream into a graph (whose records and
// waits then build the graph and order nothing now).
enum class call_kind { launch, graph_launch, record, wait, destroy_event, destroy_stream, begin_capture };

struct watched_call {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId id;
  bool per_thread;
  void* (*stream)(const void* params);
  call_kind kind = call_kind::launch;
  void* (*event)(const void* params) = nullptr;
};

template <class Params>
void* stream_field(const void* p) {
  return static_cast<const Params*>(p)->stream;
}

template <class Params>
void* hstream_field(const void* p) {
  return static_cast<const Params*>(p)->hStream;
}

template <class Params>
void* event_field(const void* p) {
  return static_cast<const Params*>(p)->event;
}

template <class Params>
void* hevent_field(const void* p) {
  return static_cast<const Params*>(p)->hEvent;
}

void* no_stream(const void*) {
  return nullptr;
}

template <class Params>
void* config_stream(const void* p) {
  auto* config = static_cast<const Params*>(p)->config;
  return config ? config->stream : nullptr;
}

template <class Params>
void* config_hstream(const void* p) {
  auto* config = static_cast<const Params*>(p)->config;
  return config ? config->hStream : nullptr;
}

#define BB_RUNTIME(name, params, how, ptsz) \
  watched_call{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name, ptsz, &how<params>}
#define BB_DRIVER(name, params, how, ptsz) \
  watched_call{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, ptsz, &how<params>}
#define BB_RUNTIME_KIND(name, params, how, ptsz, kind) \
  watched_call{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name, ptsz, &how<params>, kind}
#define BB_DRIVER_KIND(name, params, how, ptsz, kind) \
  watched_call{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, ptsz, &how<params>, kind}
#define BB_RUNTIME_EVENT(name, params, kind, ptsz)                                                              \
  watched_call{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name, ptsz, &stream_field<params>, kind, \
               &event_field<params>}
#define BB_DRIVER_EVENT(name, params, kind, ptsz)                                                               \
  watched_call{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, ptsz, &hstream_field<params>, kind, \
               &hevent_field<params>}

// Every way to put work on a stream: kernel launches (plain, extended, cooperative), graph
// launches, asynchronous copies and sets, host functions; the runtime's and the driver's
// (Triton launches through the driver).
const watched_call watched_calls[] = {
  BB_RUNTIME(cudaLaunchKernel_v7000, cudaLaunchKernel_v7000_params, stream_field, false),
  BB_RUNTIME(cudaLaunchKernel_ptsz_v7000, cudaLaunchKernel_ptsz_v7000_params, stream_field, true),
  BB_RUNTIME(cudaLaunchKernelExC_v11060, cudaLaunchKernelExC_v11060_params, config_stream, false),
  BB_RUNTIME(cudaLaunchKernelExC_ptsz_v11060, cudaLaunchKernelExC_ptsz_v11060_params, config_stream, true),
  BB_RUNTIME(cudaLaunchCooperativeKernel_v9000, cudaLaunchCooperativeKernel_v9000_params, stream_field, false),
  BB_RUNTIME(cudaLaunchCooperativeKernel_ptsz_v9000, cudaLaunchCooperativeKernel_ptsz_v9000_params, stream_field, true),
  BB_RUNTIME(cudaMemcpyAsync_v3020, cudaMemcpyAsync_v3020_params, stream_field, false),
  BB_RUNTIME(cudaMemcpyAsync_ptsz_v7000, cudaMemcpyAsync_ptsz_v7000_params, stream_field, true),
  BB_RUNTIME(cudaMemcpy2DAsync_v3020, cudaMemcpy2DAsync_v3020_params, stream_field, false),
  BB_RUNTIME(cudaMemcpy2DAsync_ptsz_v7000, cudaMemcpy2DAsync_ptsz_v7000_params, stream_field, true),
  BB_RUNTIME(cudaMemsetAsync_v3020, cudaMemsetAsync_v3020_params, stream_field, false),
  BB_RUNTIME(cudaMemsetAsync_ptsz_v7000, cudaMemsetAsync_ptsz_v7000_params, stream_field, true),
  BB_RUNTIME(cudaLaunchHostFunc_v10000, cudaLaunchHostFunc_v10000_params, stream_field, false),
  BB_RUNTIME(cudaLaunchHostFunc_ptsz_v10000, cudaLaunchHostFunc_ptsz_v10000_params, stream_field, true),
  BB_RUNTIME_KIND(cudaGraphLaunch_v10000, cudaGraphLaunch_v10000_params, stream_field, false, call_kind::graph_launch),
  BB_RUNTIME_KIND(cudaGraphLaunch_ptsz_v10000, cudaGraphLaunch_ptsz_v10000_params, stream_field, true, call_kind::graph_launch),
  BB_DRIVER(cuLaunchKernel, cuLaunchKernel_params, hstream_field, false),
  BB_DRIVER(cuLaunchKernel_ptsz, cuLaunchKernel_ptsz_params, hstream_field, true),
  BB_DRIVER(cuLaunchKernelEx, cuLaunchKernelEx_params, config_hstream, false),
  BB_DRIVER(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_ptsz_params, config_hstream, true),
  BB_DRIVER(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_params, hstream_field, false),
  BB_DRIVER(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_ptsz_params, hstream_field, true),
  BB_DRIVER(cuLaunchGridAsync, cuLaunchGridAsync_params, hstream_field, false),
  BB_DRIVER(cuMemcpyAsync, cuMemcpyAsync_params, hstream_field, false),
  BB_DRIVER(cuMemcpyAsync_ptsz, cuMemcpyAsync_ptsz_params, hstream_field, true),
  BB_DRIVER(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_params, hstream_field, false),
  BB_DRIVER(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2_ptsz_params, hstream_field, true),
  BB_DRIVER(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_params, hstream_field, false),
  BB_DRIVER(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2_ptsz_params, hstream_field, true),
  BB_DRIVER(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_params, hstream_field, false),
  BB_DRIVER(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2_ptsz_params, hstream_field, true),
  BB_DRIVER(cuMemsetD8Async, cuMemsetD8Async_params, hstream_field, false),
  BB_DRIVER(cuMemsetD8Async_ptsz, cuMemsetD8Async_ptsz_params, hstream_field, true),
  BB_DRIVER(cuMemsetD32Async, cuMemsetD32Async_params, hstream_field, false),
  BB_DRIVER(cuMemsetD32Async_ptsz, cuMemsetD32Async_ptsz_params, hstream_field, true),
  BB_DRIVER(cuLaunchHostFunc, cuLaunchHostFunc_params, hstream_field, false),
  BB_DRIVER(cuLaunchHostFunc_ptsz, cuLaunchHostFunc_ptsz_params, hstream_field, true),
  BB_DRIVER_KIND(cuGraphLaunch, cuGraphLaunch_params, hstream_field, false, call_kind::graph_launch),
  BB_DRIVER_KIND(cuGraphLaunch_ptsz, cuGraphLaunch_ptsz_params, hstream_field, true, call_kind::graph_launch),
  // How work on another stream is tied to the caller's: an event recorded on one stream that
  // another waits for (a fork from the caller's stream, a join back into it).
  BB_RUNTIME_EVENT(cudaEventRecord_v3020, cudaEventRecord_v3020_params, call_kind::record, false),
  BB_RUNTIME_EVENT(cudaEventRecord_ptsz_v7000, cudaEventRecord_ptsz_v7000_params, call_kind::record, true),
  BB_RUNTIME_EVENT(cudaEventRecordWithFlags_v11010, cudaEventRecordWithFlags_v11010_params, call_kind::record, false),
  BB_RUNTIME_EVENT(cudaEventRecordWithFlags_ptsz_v11010, cudaEventRecordWithFlags_ptsz_v11010_params,
                   call_kind::record, true),
  BB_RUNTIME_EVENT(cudaStreamWaitEvent_v3020, cudaStreamWaitEvent_v3020_params, call_kind::wait, false),
  BB_RUNTIME_EVENT(cudaStreamWaitEvent_ptsz_v7000, cudaStreamWaitEvent_ptsz_v7000_params, call_kind::wait, true),
  BB_DRIVER_EVENT(cuEventRecord, cuEventRecord_params, call_kind::record, false),
  BB_DRIVER_EVENT(cuEventRecord_ptsz, cuEventRecord_ptsz_params, call_kind::record, true),
  BB_DRIVER_EVENT(cuEventRecordWithFlags, cuEventRecordWithFlags_params, call_kind::record, false),
  BB_DRIVER_EVENT(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags_ptsz_params, call_kind::record, true),
  BB_DRIVER_EVENT(cuStreamWaitEvent, cuStreamWaitEvent_params, call_kind::wait, false),
  BB_DRIVER_EVENT(cuStreamWaitEvent_ptsz, cuStreamWaitEvent_ptsz_params, call_kind::wait, true),
  // What would make a record or a wait mean something else than it seems: an event destroyed
  // (its handle may come back from the next create, never recorded), a stream destroyed (its
  // join can no longer be checked), a capture begun (records and waits build a graph).
  watched_call{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020, false, &no_stream,
               call_kind::destroy_event, &event_field<cudaEventDestroy_v3020_params>},
  watched_call{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2, false, &no_stream,
               call_kind::destroy_event, &hevent_field<cuEventDestroy_v2_params>},
  BB_RUNTIME_KIND(cudaStreamDestroy_v5050, cudaStreamDestroy_v5050_params, stream_field, false, call_kind::destroy_stream),
  BB_DRIVER_KIND(cuStreamDestroy_v2, cuStreamDestroy_v2_params, hstream_field, false, call_kind::destroy_stream),
  BB_RUNTIME_KIND(cudaStreamBeginCapture_v10000, cudaStreamBeginCapture_v10000_params, stream_field, false,
                  call_kind::begin_capture),
  BB_RUNTIME_KIND(cudaStreamBeginCapture_ptsz_v10000, cudaStreamBeginCapture_ptsz_v10000_params, stream_field, true,
                  call_kind::begin_capture),
  BB_RUNTIME_KIND(cudaStreamBeginCaptureToGraph_v12030, cudaStreamBeginCaptureToGraph_v12030_params, stream_field,
                  false, call_kind::begin_capture),
  BB_RUNTIME_KIND(cudaStreamBeginCaptureToGraph_ptsz_v12030, cudaStreamBeginCaptureToGraph_ptsz_v12030_params,
                  stream_field, true, call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCapture, cuStreamBeginCapture_params, hstream_field, false, call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCapture_ptsz, cuStreamBeginCapture_ptsz_params, hstream_field, true,
                 call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_params, hstream_field, false,
                 call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2_ptsz_params, hstream_field, true,
                 call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_params, hstream_field, false,
                 call_kind::begin_capture),
  BB_DRIVER_KIND(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph_ptsz_params, hstream_field, true,
                 call_kind::begin_capture),
};

#undef BB_RUNTIME
#undef BB_DRIVER
#undef BB_RUNTIME_EVENT
#undef BB_DRIVER_EVENT
#undef BB_RUNTIME_KIND
#undef BB_DRIVER_KIND

// The stream handles 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD as one of the last two.
uintptr_t canonical(void* stream, bool per_thread) {
  auto v = reinterpret_cast<uintptr_t>(stream);
  if (v == 0)
    return per_thread ? 0x2 : 0x1;
  return v;
}

// Work on a stream other than the caller's, during one watch. It is inside the caller's
// interval, as aten's own multi-stream operators do it (cuDNN's convolutions), when the stream
// waited for an event recorded on the caller's stream before its first launch (a fork) and
// the caller's stream then waited for an event recorded on it after its last launch (a join):
// its work starts after the caller's start and ends before the caller's end. Anything else is
// work the caller's timer does not see.
struct side_stream {
  int64_t launches = 0;
  bool forked = false;    // waited for the caller's stream before its first launch
  int64_t joined = 0;     // its launches that the caller's stream has waited for
  bool unverifiable = false; // destroyed, or captured into a graph: its join cannot be checked
  std::string first;      // its first launch, described
};

// An event's last record: on which stream, after how many of that stream's launches.
struct recorded_event {
  uintptr_t stream = 0;
  int64_t launches = 0;
};

// What the callbacks fill; they run on whichever thread launched.
struct watch_state {
  std::mutex mutex;
  uintptr_t timed = 0;
  int64_t launches = 0;
  std::map<uintptr_t, side_stream> sides;
  std::map<uintptr_t, recorded_event> events;
  std::set<uintptr_t> capturing; // streams (not the caller's) a capture began on
};

watch_state& state() {
  static watch_state s;
  return s;
}

constexpr size_t max_described = 4;

// Each watch's number: a thread's count of runtime calls in progress holds for one watch only.
std::atomic<uint64_t> watch_number{0};

// The runtime calls in progress on this thread, during watch `watch`: a runtime launch makes
// its driver call within it, the same launch, counted once (at the runtime's entry).
struct runtime_calls {
  uint64_t watch = 0;
  int depth = 0;
};
thread_local runtime_calls in_runtime;

// Whether a call that returned succeeded (its cudaError_t or CUresult is 0).
bool succeeded(const CUpti_CallbackData* info) {
  return info->functionReturnValue && *static_cast<const int*>(info->functionReturnValue) == 0;
}

void CUPTIAPI on_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  auto* info = static_cast<const CUpti_CallbackData*>(data);
  for (const auto& w : watched_calls) {
    if (w.domain != domain || w.id != id)
      continue;
    auto now = watch_number.load(std::memory_order_relaxed);
    if (in_runtime.watch != now)
      in_runtime = {now, 0};
    bool enter = info->callbackSite == CUPTI_API_ENTER;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
      if (enter)
        ++in_runtime.depth;
      else
        in_runtime.depth = std::max(0, in_runtime.depth - 1);
    } else if (in_runtime.depth > 0) {
      return; // the driver call a runtime call makes: the same call, seen as the runtime's
    }
    // Launches, destroys and captures count at their entry (a launch that then fails counts
    // all the same); records and waits at their exit, and only when they succeeded: a failed
    // one orders nothing.
    bool ordering = w.kind == call_kind::record || w.kind == call_kind::wait;
    if (ordering ? enter || !succeeded(info) : !enter)
      return;
    auto stream = canonical(w.stream(info->functionParams), w.per_thread);
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    switch (w.kind) {
      case call_kind::record:
        if (!s.capturing.count(stream)) {
          auto event = reinterpret_cast<uintptr_t>(w.event(info->functionParams));
          auto side = s.sides.find(stream);
          s.events[event] = {stream, side == s.sides.end() ? 0 : side->second.launches};
        }
        return;
      case call_kind::wait: {
        if (s.capturing.count(stream))
          return;
        auto event = s.events.find(reinterpret_cast<uintptr_t>(w.event(info->functionParams)));
        if (event == s.events.end())
          return; // recorded before the watch, or destroyed since: ties nothing of this call's
        const auto& rec = event->second;
        if (stream == s.timed && rec.stream != s.timed) {
          auto& side = s.sides[rec.stream];
          side.joined = std::max(side.joined, rec.launches);
        } else if (stream != s.timed && rec.stream == s.timed) {
          auto& side = s.sides[stream];
          side.forked = side.forked || side.launches == 0;
        }
        return;
      }
      case call_kind::destroy_event:
        s.events.erase(reinterpret_cast<uintptr_t>(w.event(info->functionParams)));
        return;
      case call_kind::destroy_stream:
      case call_kind::begin_capture:
        if (stream != s.timed) {
          s.sides[stream].unverifiable = true;
          if (w.kind == call_kind::begin_capture)
            s.capturing.insert(stream);
        }
        return;
      case call_kind::launch:
      case call_kind::graph_launch:
        break;
    }
    // A graph may record any event again when it runs: no earlier record can be trusted.
    if (w.kind == call_kind::graph_launch)
      s.events.clear();
    ++s.launches;
    if (stream != s.timed) {
      auto& side = s.sides[stream];
      ++side.launches;
      if (side.first.empty()) {
        char handle[32];
        std::snprintf(handle, sizeof handle, "%#llx", static_cast<unsigned long long>(stream));
        side.first = std::string(info->functionName ? info->functionName : "a launch") + " on stream " + handle;
      }
    }
    return;
  }
}

cupti_api load() {
  cupti_api api;
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {BB_CUPTI_LIBRARY, "libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
    tried += std::string(tried.empty() ? "" : ", ") + name;
  }
  if (!lib) {
    api.why = "no libcupti could be loaded (tried " + tried + ")";
    return api;
  }
  api.subscribe = reinterpret_cast<decltype(api.subscribe)>(dlsym(lib, "cuptiSubscribe"));
  api.enable = reinterpret_cast<decltype(api.enable)>(dlsym(lib, "cuptiEnableCallback"));
  api.state = reinterpret_cast<decltype(api.state)>(dlsym(lib, "cuptiGetCallbackState"));
  api.result_string = reinterpret_cast<decltype(api.result_string)>(dlsym(lib, "cuptiGetResultString"));
  if (!api.subscribe || !api.enable || !api.state || !api.result_string) {
    api.why = "libcupti lacks the callback API";
    return api;
  }
  auto rc = api.subscribe(&api.subscriber, reinterpret_cast<CUpti_CallbackFunc>(&on_call), nullptr);
  if (rc != CUPTI_SUCCESS) {
    const char* text = nullptr;
    api.result_string(rc, &text);
    api.why = std::string("CUPTI refused a subscriber: ") + (text ? text : "unknown error");
  }
  return api;
}

cupti_api& api() {
  static cupti_api a = load();
  return a;
}

bool set_callbacks(bool on) {
  auto& a = api();
  for (const auto& w : watched_calls)
    if (a.enable(on ? 1 : 0, a.subscriber, w.domain, w.id) != CUPTI_SUCCESS)
      return false;
  return true;
}

// Whether every callback is still on: a kernel that turned them off is not believed.
bool callbacks_still_on() {
  auto& a = api();
  for (const auto& w : watched_calls) {
    uint32_t on = 0;
    if (a.state(&on, a.subscriber, w.domain, w.id) != CUPTI_SUCCESS || !on)
      return false;
  }
  return true;
}

} // namespace

bool stream_watch_available(std::string* why) {
  auto& a = api();
  if (why)
    *why = a.why;
  return a.why.empty();
}

stream_watch::stream_watch() {
  if (!stream_watch_available())
    return;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.timed = canonical(c10::cuda::getCurrentCUDAStream().stream(), false);
    watch_number.fetch_add(1, std::memory_order_relaxed);
    s.launches = 0;
    s.sides.clear();
    s.events.clear();
    s.capturing.clear();
  }
  if (!set_callbacks(true)) {
    // Not a kernel's doing (none has run yet): the watch is out of use in this process, and
    // the runner falls back to the pending-work probe.
    set_callbacks(false);
    api().why = "CUPTI would not turn on its callbacks";
    return;
  }
  on_ = true;
}

stream_watch::~stream_watch() {
  stop();
}

stream_report stream_watch::stop() {
  stream_report r;
  if (!on_)
    return r;
  on_ = false;
  bool intact = callbacks_still_on();
  set_callbacks(false);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  r.launches = s.launches;
  // Every stream whose work the caller's stream did not fork and join: its launches are not
  // inside the caller's interval.
  // A join is believed only once checked: when the caller's stream is done, a stream it joined
  // has nothing left to run.
  bool synced = false;
  auto still_running = [&](uintptr_t stream) {
    if (!synced) {
      (void)cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s.timed));
      synced = true;
    }
    auto q = cudaStreamQuery(reinterpret_cast<cudaStream_t>(stream));
    (void)cudaGetLastError();
    return q != cudaSuccess;
  };
  size_t unjoined = 0;
  for (const auto& [stream, side] : s.sides) {
    if (side.launches == 0)
      continue;
    if (side.forked && side.joined >= side.launches && !side.unverifiable && !still_running(stream)) {
      r.joined += side.launches;
      continue;
    }
    std::string why = !side.forked                    ? ""
                      : side.joined < side.launches   ? ", not joined back"
                      : side.unverifiable             ? ", its join not checkable (the stream was destroyed or captured)"
                                                      : ", joined in name only (still running when the caller's stream was done)";
    if (++unjoined <= max_described)
      r.elsewhere.push_back(side.first + (side.launches > 1 ? " (" + std::to_string(side.launches) + " launches)" : "")
                            + why);
  }
  if (unjoined > max_described)
    r.elsewhere.push_back("and " + std::to_string(unjoined - max_described) + " more streams");
  s.sides.clear();
  s.events.clear();
  s.capturing.clear();
  if (!intact)
    r.elsewhere.push_back("the watch's callbacks were turned off during the call");
  return r;
}

#else

bool stream_watch_available(std::string* why) {
  if (why)
#ifdef BB_WITH_CUDA
    *why = "this bbrunner was built without CUPTI's headers";
#else
    *why = "this bbrunner was built without CUDA";
#endif
  return false;
}

stream_watch::stream_watch() = default;

stream_watch::~stream_watch() = default;

stream_report stream_watch::stop() {
  return {};
}

#endif

} // namespace bb::runner
