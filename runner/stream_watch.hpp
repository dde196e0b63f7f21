#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bb::runner {

/// What a watched call put on the device, as CUPTI's callbacks on the CUDA runtime's and
/// driver's launches, asynchronous copies and sets, host functions and graph launches saw it.
struct stream_report {
  /// Every launch, copy, set and graph launch seen, from any thread.
  int64_t launches = 0;
  /// Those on a stream other than the one the call was made on: "cuLaunchKernel on stream
  /// 0x55d0c3a0" (at most a few), or why the watch itself can no longer be believed.
  std::vector<std::string> elsewhere;
  /// Launches on other streams that the caller's stream forked and joined (waited for, and
  /// was waited for, through events): inside the caller's interval, as cuDNN's multi-stream
  /// convolutions are, and not in `elsewhere`.
  int64_t joined = 0;
};

/// Whether device work can be watched in this process: libcupti found and loaded, and this
/// process its only subscriber. Else false, with the reason in `why`. Decided once.
bool stream_watch_available(std::string* why = nullptr);

/// Watches, from construction to stop(), every launch this process makes on the current CUDA
/// device and tells apart those on the stream current at construction, and those on another
/// stream that the current one forked before they ran and joined after. A kernel that leaves
/// its work on another stream returns before that work is done, so that a timer recording
/// events on the current stream does not see it; this finds such work however the stream was
/// made (a name built at run time, cudaStreamCreate in C++, a stream pool) and however short.
/// One watch at a time; without CUDA or CUPTI it sees nothing and stop() reports nothing.
class stream_watch {
public:
  stream_watch();
  ~stream_watch();
  stream_watch(const stream_watch&) = delete;
  stream_watch& operator=(const stream_watch&) = delete;

  /// Ends the watch (the destructor does too) and says what it saw.
  stream_report stop();

private:
  bool on_ = false;
};

} // namespace bb::runner
