#pragma once

#include <cstdint>
#include <cstring>

// The scalar tanh of fast_tanh.h, inline so that the element-wise kernels (layer_kernels.cpp)
// vectorise it in their own loops. Both branches are evaluated and blended: translation units
// that include this need -fno-trapping-math to be vectorised (src/models/CMakeLists.txt).

namespace mlip::models::detail {

/// The bits of `from` read as a To (same size), as std::bit_cast.
template <typename To, typename From>
inline __attribute__((always_inline)) To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From), "bits_as: sizes differ");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
inline __attribute__((always_inline)) uint64_t as_bits(double d) { return bits_as<uint64_t>(d); }
inline __attribute__((always_inline)) double as_double(uint64_t u) { return bits_as<double>(u); }
inline __attribute__((always_inline)) uint32_t as_bits(float f) { return bits_as<uint32_t>(f); }
inline __attribute__((always_inline)) float as_float(uint32_t u) { return bits_as<float>(u); }

/// Branch-free tanh: Cephes' rational approximation for |x| < 0.625, else
/// sign(x) (1 - 2 / (exp(2|x|) + 1)) with exp by range reduction (n ln 2 + r, |r| <= ln2 / 2),
/// a degree-13 Taylor polynomial and 2^n from the exponent bits. One division either way.
inline __attribute__((always_inline)) double tanh_value(double v) {
  const uint64_t sign = as_bits(v) & 0x8000000000000000ull;
  const double a = as_double(as_bits(v) & 0x7fffffffffffffffull);
  const double z = v * v;
  const double p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3;
  const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
  const double y0 = 2.0 * a;
  const double y = y0 < 40.0 ? y0 : 40.0;  // tanh(20) = 1 in double; also maps NaN to 40
  const double shifter = 0x1.8p52;
  const double t = y * 1.4426950408889634074 + shifter;
  const double n = t - shifter;
  const double r = (y - n * 6.93145751953125e-1) - n * 1.42860682030941723212e-6;
  double e = 1.0 / 6227020800.0;
  e = e * r + 1.0 / 479001600.0;
  e = e * r + 1.0 / 39916800.0;
  e = e * r + 1.0 / 3628800.0;
  e = e * r + 1.0 / 362880.0;
  e = e * r + 1.0 / 40320.0;
  e = e * r + 1.0 / 5040.0;
  e = e * r + 1.0 / 720.0;
  e = e * r + 1.0 / 120.0;
  e = e * r + 1.0 / 24.0;
  e = e * r + 1.0 / 6.0;
  e = e * r + 0.5;
  e = e * r + 1.0;
  e = e * r + 1.0;
  const double ex = e * as_double((as_bits(t) - as_bits(shifter) + 1023) << 52);
  const bool small = a < 0.625;
  // small: x (1 + x^2 P/Q); large: sign (1 - 2 / (e + 1)); the product keeps tanh(-0) = -0.
  const double num = small ? z * p : -2.0;
  const double den = small ? q : ex + 1.0;
  const double base = small ? v : as_double(as_bits(1.0) | sign);
  return base * (1.0 + num / den);
}

/// The same scheme in float arithmetic (16 lanes with AVX-512): Cephes tanhf's odd polynomial
/// for |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1)) with Cephes expf's range reduction
/// and degree-6 polynomial.
inline __attribute__((always_inline)) float tanh_value(float v) {
  const uint32_t sign = as_bits(v) & 0x80000000u;
  const float a = as_float(as_bits(v) & 0x7fffffffu);
  const float z = v * v;
  const float p =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) *
      z;
  const float y0 = 2.0f * a;
  const float y = y0 < 20.0f ? y0 : 20.0f;  // tanh(10) = 1 in float; also maps NaN to 20
  const float shifter = 0x1.8p23f;
  const float t = y * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const float r = (y - n * 0.693359375f) + n * 2.12194440e-4f;
  const float r2 = r * r;
  const float e =
      (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
        1.6666665459e-1f) * r + 5.0000001201e-1f) * r2 + r + 1.0f;
  const float ex = e * as_float((as_bits(t) - as_bits(shifter) + 127) << 23);
  const bool small = a < 0.625f;
  return small ? v * (1.0f + p) : as_float(as_bits(1.0f - 2.0f / (ex + 1.0f)) | sign);
}

}  // namespace mlip::models::detail
