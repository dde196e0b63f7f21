#pragma once

// The types of messages/settings.def's TYPE column, and the macros that declare a struct's
// members from that list.

#include <cstdint>
#include <string>

namespace bb::setting_types {
using text = std::string;
using boolean = bool;
using integer = int64_t;
using number = double;
} // namespace bb::setting_types

/// A member of the struct whose list entries these are: `TYPE MEMBER = DEFAULT;`.
#define BB_SETTING_MEMBER(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)                    \
  ::bb::setting_types::TYPE MEMBER = DEFAULT;
/// An entry of the list that belongs to another struct.
#define BB_SETTING_ELSEWHERE(KEY, TYPE, MEMBER, DEFAULT, RULE, SCOPE, FLAG, DOC)
