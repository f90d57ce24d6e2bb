// SHA-256 (archive/sha256.h) against the examples of FIPS 180-4 / NIST's test vectors.
#include <gtest/gtest.h>

#include <string>

#include "archive/sha256.h"

using mlip::archive::Sha256;
using mlip::archive::sha256_hex;

TEST(Sha256, MatchesTheStandardsExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + i % 26) + std::to_string(i);
  const std::string whole = sha256_hex(text);
  for (size_t piece : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u, 1000u}) {
    Sha256 h;
    for (size_t at = 0; at < text.size(); at += piece) h.update(std::string_view(text).substr(at, piece));
    EXPECT_EQ(h.hex_digest(), whole) << "pieces of " << piece;
  }
  std::string changed = text;
  changed[text.size() / 2] ^= 1;
  EXPECT_NE(sha256_hex(changed), whole);
}
