#include "process/runner_loop.hpp"

#include <algorithm>
#include <iostream>

#include "process/frames.hpp"

namespace bb {

bool send_reply(int fd, const runner_reply& reply) {
  return frames::write_frame(fd, pack(reply));
}

namespace {

bool spoils(const runner_reply& reply) {
  auto& flags = reply.result.flags;
  return reply.kind == runner_reply_kind::result
         && (spoils_runner(reply.result)
             || std::find(flags.begin(), flags.end(), "replaces_timer") != flags.end());
}

} // namespace

int serve_runner(int fd, const char* name, const runner_handlers& handlers) {
  runner_options opts;
  runner_reply hello;
  hello.kind = runner_reply_kind::hello;
  if (!send_reply(fd, hello))
    return 3;
  for (;;) {
    std::string frame;
    auto st = frames::read_frame(fd, frame, -1);
    if (st == frames::read_status::closed)
      return 0;
    if (st != frames::read_status::ok) {
      std::cerr << name << ": cannot read from the evaluator\n";
      return 3;
    }
    runner_request req;
    try {
      req = unpack<runner_request>(frame);
    } catch (const std::exception& e) {
      std::cerr << name << ": malformed request: " << e.what() << "\n";
      return 3;
    }
    runner_reply reply;
    if (req.kind == runner_request_kind::stop)
      return 0;
    if (req.kind == runner_request_kind::configure) {
      opts = req.options;
      reply.kind = runner_reply_kind::ready;
      reply.where = handlers.configure(opts);
    } else if (req.kind == runner_request_kind::resolve) {
      reply.kind = runner_reply_kind::schemas;
      for (auto& op : req.ops)
        reply.schemas.push_back(handlers.resolve(op));
    } else if (req.kind == runner_request_kind::check) {
      reply.kind = runner_reply_kind::checked;
      reply.text = handlers.check(opts);
    } else {
      reply = handlers.evaluate(fd, req, opts);
    }
    if (!send_reply(fd, reply))
      return 3;
    if (spoils(reply) || (reply.kind == runner_reply_kind::result && handlers.spoiled && handlers.spoiled()))
      return 4;
  }
}

} // namespace bb
