#pragma once

// Length-prefixed frames over a stream socket: 4 bytes big-endian length, then the payload.
// Used between an evaluator and its bbrunner on a socketpair.

#include <cstdint>
#include <string>

namespace bb::frames {

enum class read_status { ok, timeout, closed, error };

/// Largest frame accepted; a longer length prefix is treated as a broken peer.
inline constexpr uint32_t max_frame_bytes = 256u << 20;

/// Writes one frame, retrying on EINTR and short writes. False if the peer is gone.
bool write_frame(int fd, const std::string& payload);

/// Reads one frame, waiting at most `timeout_ms` (negative: forever) for the whole frame.
read_status read_frame(int fd, std::string& payload, int timeout_ms);

} // namespace bb::frames
