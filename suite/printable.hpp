#pragma once
// Text from outside (a file's lines, a host name) made safe to print on a terminal.

#include <cstdio>
#include <string>

namespace bb {

/// `text` safe to print on a terminal: every byte that is not printable ASCII or part of a
/// valid UTF-8 sequence (control characters, escape, stray high bytes) as \xNN.
inline std::string printable(const std::string& text) {
  // The length of the UTF-8 sequence at text[i], 0 when it is not one.
  auto sequence = [&](size_t i) -> size_t {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char c = byte(i);
    size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (n == 0 || c > 0xf4 || i + n > text.size())
      return 0;
    // U+0080..U+009F are control characters too (U+009B starts a terminal's escape sequence).
    if (c == 0xc2 && byte(i + 1) < 0xa0)
      return 0;
    for (size_t k = 1; k < n; ++k)
      if ((byte(i + k) & 0xc0) != 0x80)
        return 0;
    return n;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += text[i];
    } else if (size_t n = c >= 0x80 ? sequence(i) : 0; n > 0) {
      out.append(text, i, n);
      i += n - 1;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

} // namespace bb
