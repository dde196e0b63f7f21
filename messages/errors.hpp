#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace bb {

/// The project's error codes; the message text travels as the error's context.
enum class errc : uint8_t {
  bad_config = 1,
  bad_input,
  io_error,
  runner_failed,
  not_implemented,
};

} // namespace bb

CAF_ERROR_CODE_ENUM(bb::errc, "bb")

namespace bb {

inline caf::error make_error(errc code, std::string text) {
  return caf::make_error(code, std::move(text));
}

/// The human-readable text of an error: its message for project errors, CAF's rendering
/// otherwise.
inline std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return caf::to_string(err);
}

} // namespace bb
