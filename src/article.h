#pragma once

#include <cctype>
#include <string>

namespace mlip {

/// `noun` with its indefinite article, for messages: "an equivariant", "a se_e2_a". By the
/// first letter as written (a vowel takes "an"), which is right for the words messages put here:
/// model types, file kinds.
inline std::string with_article(const std::string& noun) {
  const char first = noun.empty() ? 'x' : char(std::tolower(static_cast<unsigned char>(noun[0])));
  const bool vowel = first == 'a' || first == 'e' || first == 'i' || first == 'o' || first == 'u';
  return (vowel ? "an " : "a ") + noun;
}

}  // namespace mlip
