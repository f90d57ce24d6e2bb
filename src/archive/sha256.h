#pragma once

#include <memory>
#include <string>
#include <string_view>

// OpenSSL's digest context (openssl/types.h: typedef struct evp_md_ctx_st EVP_MD_CTX), named
// here so that users of this header do not include OpenSSL's.
struct evp_md_ctx_st;

namespace mlip::archive {

/// SHA-256 (FIPS 180-4) of a byte stream, fed in pieces: the checksum that checkpoints and
/// frozen models carry (docs/robustness.md "Checksums"). Computed by OpenSSL's libcrypto
/// (EVP_sha256 through the EVP digest API).
class Sha256 {
 public:
  /// A fresh digest of no bytes. Throws mlip::Error when OpenSSL cannot start one.
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// Feeds the next `bytes` of the stream.
  void update(std::string_view bytes);
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  /// Frees an OpenSSL digest context (EVP_MD_CTX_free).
  struct ContextDeleter {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, ContextDeleter> context_;
};

/// SHA-256 of `bytes` in hex.
std::string sha256_hex(std::string_view bytes);

}  // namespace mlip::archive
