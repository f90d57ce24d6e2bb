#pragma once

#include <cstdio>
#include <string>

namespace mlip {

/// A size in bytes as a person reads it, binary units with one decimal: "18.0 MiB" below one
/// GiB, "4.0 GiB", "2.5 TiB", and from 1000 TiB on two significant digits ("1.5e+03 TiB"), so
/// that an impossible request (a neighbour list of 10^15 pairs) still reads as a number.
/// Used by every message that names an amount of memory or a file size.
inline std::string bytes_in_words(double bytes) {
  const double kib = 1024.0, mib = kib * kib, gib = mib * kib, tib = gib * kib;
  char text[64];
  if (bytes >= 1000.0 * tib)
    std::snprintf(text, sizeof text, "%.2g TiB", bytes / tib);
  else if (bytes >= tib)
    std::snprintf(text, sizeof text, "%.1f TiB", bytes / tib);
  else if (bytes >= gib)
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / gib);
  else
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / mib);
  return text;
}

}  // namespace mlip
