#pragma once

// SHA-256 (FIPS 180-4) for content addresses: artefact hashes and compile-cache keys.

#include <string>
#include <string_view>

namespace bb {

/// The SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

} // namespace bb
