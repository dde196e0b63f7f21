#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include "process/frames.hpp"
#include "messages/runner_protocol.hpp"

using namespace bb;

TEST_CASE("frames carry msgpack records across a socketpair", "[process]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  runner_request req;
  req.kind = runner_request_kind::evaluate;
  req.job.job_id = 7;
  req.job.op_name = "aten.relu.default";
  req.job.correctness_inputs = {"((T([2], f32),), {})"};
  REQUIRE(frames::write_frame(sv[0], pack(req)));
  std::string payload;
  REQUIRE(frames::read_frame(sv[1], payload, 1000) == frames::read_status::ok);
  auto back = unpack<runner_request>(payload);
  CHECK(back.kind == runner_request_kind::evaluate);
  CHECK(back.job.job_id == 7);
  CHECK(back.job.correctness_inputs == req.job.correctness_inputs);

  CHECK(frames::read_frame(sv[1], payload, 50) == frames::read_status::timeout);
  ::close(sv[0]);
  CHECK(frames::read_frame(sv[1], payload, 1000) == frames::read_status::closed);
  ::close(sv[1]);
}

TEST_CASE("an oversized length prefix is an error, not an allocation", "[process]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  REQUIRE(::write(sv[0], huge, 4) == 4);
  std::string payload;
  CHECK(frames::read_frame(sv[1], payload, 1000) == frames::read_status::error);
  ::close(sv[0]);
  ::close(sv[1]);
}
