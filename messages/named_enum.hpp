#pragma once

// Closed sets as enums with one string table each: BB_NAMED_ENUM(kernel_kind, aten, py, ...)
// declares the enum and its names from one list. A named enum's name is what it is outside
// the process: on the wire (msgpack), in JSON and in logs, so that a peer or a file reads it
// whatever the enum's order. Comparing a closed set's text anywhere else is what this avoids.
// Torch- and CAF-free (CAF 0.17 serializes an enum as its underlying integer, and prints it
// with the to_string below).

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <msgpack.hpp>

namespace bb {

/// Specialised by BB_NAMED_ENUM: the names, in the enum's order.
template <class E>
struct enum_names {
  static constexpr bool named = false;
};

template <class E>
inline constexpr bool is_named_enum = enum_names<E>::named;

template <class E, class = std::enable_if_t<is_named_enum<E>>>
const char* to_string(E x) {
  auto i = static_cast<size_t>(x);
  return i < enum_names<E>::count ? enum_names<E>::names[i] : "unknown";
}

template <class E, class = std::enable_if_t<is_named_enum<E>>>
bool from_string(std::string_view s, E& x) {
  for (size_t i = 0; i < enum_names<E>::count; ++i)
    if (s == enum_names<E>::names[i]) {
      x = static_cast<E>(i);
      return true;
    }
  return false;
}

/// The value named `s`, if it names one.
template <class E>
std::optional<E> parse_enum(std::string_view s) {
  E x;
  if (from_string(s, x))
    return x;
  return std::nullopt;
}

/// "a, b or c": the names, for an error that lists what would have been accepted.
template <class E>
std::string enum_choices() {
  std::string out;
  for (size_t i = 0; i < enum_names<E>::count; ++i)
    out += std::string(i == 0 ? "" : i + 1 == enum_names<E>::count ? " or " : ", ")
           + enum_names<E>::names[i];
  return out;
}

} // namespace bb

#define BB_ENUM_NAME_OF(r, data, x) MSGPACK_PP_STRINGIZE(x),

/// Declares `enum class Name : uint8_t { ... }` in the current namespace (which must be bb)
/// with its string table; the enumerators' names are their texts.
#define BB_NAMED_ENUM(Name, ...)                                                                  \
  enum class Name : uint8_t { __VA_ARGS__ };                                                      \
  template <>                                                                                     \
  struct enum_names<Name> {                                                                       \
    static constexpr bool named = true;                                                           \
    static constexpr const char* names[] = {                                                      \
      MSGPACK_PP_SEQ_FOR_EACH(BB_ENUM_NAME_OF, _, MSGPACK_PP_VARIADIC_TO_SEQ(__VA_ARGS__))};      \
    static constexpr size_t count = sizeof(names) / sizeof(names[0]);                             \
  }

// msgpack: a named enum travels as its name.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
namespace adaptor {

template <typename E>
struct convert<E, std::enable_if_t<bb::is_named_enum<E>>> {
  msgpack::object const& operator()(msgpack::object const& o, E& v) const {
    if (o.type != msgpack::type::STR)
      throw msgpack::type_error();
    std::string_view name(o.via.str.ptr, o.via.str.size);
    if (!bb::from_string(name, v))
      throw std::invalid_argument("'" + std::string(name) + "' is not one of " + bb::enum_choices<E>());
    return o;
  }
};

template <typename E>
struct pack<E, std::enable_if_t<bb::is_named_enum<E>>> {
  template <typename Stream>
  msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o, E const& v) const {
    auto* name = bb::to_string(v);
    o.pack_str(static_cast<uint32_t>(std::strlen(name)));
    o.pack_str_body(name, static_cast<uint32_t>(std::strlen(name)));
    return o;
  }
};

template <typename E>
struct object_with_zone<E, std::enable_if_t<bb::is_named_enum<E>>> {
  void operator()(msgpack::object::with_zone& o, E const& v) const {
    static_cast<msgpack::object&>(o) = msgpack::object(std::string(bb::to_string(v)), o.zone);
  }
};

} // namespace adaptor
} // MSGPACK_API_VERSION_NAMESPACE
} // namespace msgpack
