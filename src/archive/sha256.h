#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mlip::archive {

/// SHA-256 (FIPS 180-4) of a byte stream, fed in pieces: the checksum that checkpoints and
/// frozen models carry (docs/robustness.md "Checksums").
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  ///< bytes fed so far
};

/// SHA-256 of `bytes` in hex.
std::string sha256_hex(std::string_view bytes);

}  // namespace mlip::archive
