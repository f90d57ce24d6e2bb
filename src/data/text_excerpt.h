#pragma once
// Text from a user's file quoted in an error message (docs/robustness.md "Messages about
// inputs"): short, and with its control characters visible.

#include <cstddef>
#include <cstdio>
#include <string>

namespace mlip::data {

/// `text` for a message: control characters (a carriage return, a NUL byte, ...) written as
/// \r, \n, \t, \0 or \xHH so that they neither cut nor garble the message, and when longer than
/// `limit` characters its first `limit` followed by "... (N characters)".
inline std::string excerpt(const std::string& text, size_t limit = 60) {
  std::string out;
  const size_t shown = text.size() > limit ? limit : text.size();
  for (size_t k = 0; k < shown; ++k) {
    const unsigned char c = static_cast<unsigned char>(text[k]);
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == 0)
      out += "\\0";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  if (text.size() > limit) out += "... (" + std::to_string(text.size()) + " characters)";
  return out;
}

}  // namespace mlip::data
