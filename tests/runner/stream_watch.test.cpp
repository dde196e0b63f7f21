#include <catch2/catch.hpp>

#include "skip.hpp"

#include <ATen/ATen.h>

#ifdef BB_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "runner/stream_watch.hpp"
#include "runner/timing.hpp"

using namespace bb::runner;

TEST_CASE("the stream watch tells work on the caller's stream from work on any other", "[gpu]") {
#ifdef BB_WITH_CUDA
  if (!at::hasCUDA()) {
    BB_SKIP("no GPU on this machine: [gpu] test skipped");
  }
  std::string why;
  INFO(why);
  REQUIRE(stream_watch_available(&why));
  auto x = at::rand({1}, at::TensorOptions().device(at::kCUDA));
  synchronize("cuda");
  {
    stream_watch watch;
    (void)at::relu(x);
    auto r = watch.stop();
    CHECK(r.launches >= 1);
    CHECK(r.elsewhere.empty());
  }
  {
    // One element's negation on a pool stream: microseconds of work, still seen.
    stream_watch watch;
    auto side = c10::cuda::getStreamFromPool();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      (void)at::neg(x);
    }
    (void)at::relu(x);
    auto r = watch.stop();
    CHECK(r.launches >= 2);
    REQUIRE(r.elsewhere.size() == 1);
    CHECK(r.elsewhere[0].find(" on stream 0x") != std::string::npos);
  }
  {
    // A watch started on a non-default stream takes that one as the caller's.
    auto side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    stream_watch watch;
    (void)at::relu(x);
    auto r = watch.stop();
    CHECK(r.launches >= 1);
    CHECK(r.elsewhere.empty());
  }
  {
    // A watch counts its own launches only: one stopped before a launch saw none, and what
    // a watch saw is not carried into the next.
    stream_watch before;
    auto none = before.stop();
    (void)at::relu(x);
    CHECK(none.launches == 0);
    stream_watch after;
    auto side = c10::cuda::getStreamFromPool();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      (void)at::neg(x);
    }
    auto r = after.stop();
    stream_watch next;
    (void)at::relu(x);
    auto n = next.stop();
    CHECK(r.elsewhere.size() == 1);
    CHECK(n.elsewhere.empty());
    CHECK(n.launches >= 1);
  }
  // Work on a side stream tied to the caller's through events, as cuDNN's multi-stream
  // convolutions do it: `fork` has the side stream wait for the caller's before its launch,
  // `join` has the caller's wait for it after.
  auto tied = [&](bool fork, bool join) {
    stream_watch watch;
    auto caller = c10::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool();
    at::cuda::CUDAEvent forked, joined;
    if (fork) {
      forked.record(caller);
      forked.block(side);
    }
    {
      c10::cuda::CUDAStreamGuard guard(side);
      (void)at::neg(x);
    }
    if (join) {
      joined.record(side);
      joined.block(caller);
    }
    (void)at::relu(x);
    return watch.stop();
  };
  {
    auto r = tied(true, true);
    INFO((r.elsewhere.empty() ? std::string() : r.elsewhere[0]));
    CHECK(r.elsewhere.empty());
    CHECK(r.joined == 1);
  }
  {
    // Joined only: the side stream could run before the caller's interval began.
    auto r = tied(false, true);
    REQUIRE(r.elsewhere.size() == 1);
    CHECK(r.joined == 0);
  }
  {
    // Forked only: the caller's interval ends without it.
    auto r = tied(true, false);
    REQUIRE(r.elsewhere.size() == 1);
    CHECK(r.elsewhere[0].find("not joined back") != std::string::npos);
  }
  {
    // A join through an event recorded before the side stream's launch covers nothing.
    stream_watch watch;
    auto caller = c10::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool();
    at::cuda::CUDAEvent forked, early;
    forked.record(caller);
    forked.block(side);
    early.record(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      (void)at::neg(x);
    }
    early.block(caller);
    auto r = watch.stop();
    CHECK(r.elsewhere.size() == 1);
  }
  {
    // A wait that fails (flags CUDA refuses) orders nothing: no fork.
    stream_watch watch;
    auto caller = c10::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool();
    at::cuda::CUDAEvent forked, joined;
    forked.record(caller);
    CHECK(cudaStreamWaitEvent(side.stream(), forked.event(), 0xBAD) != cudaSuccess);
    (void)cudaGetLastError();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      (void)at::neg(x);
    }
    joined.record(side);
    joined.block(caller);
    auto r = watch.stop();
    CHECK(r.elsewhere.size() == 1);
    CHECK(r.joined == 0);
  }
  synchronize("cuda");
#else
  BB_SKIP("this build has no CUDA: [gpu] test skipped");
#endif
}
