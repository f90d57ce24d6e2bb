#include "models/fast_tanh.h"

#include <cstring>

// Compiled with -fno-trapping-math (src/models/CMakeLists.txt): both branches below are
// evaluated and blended, which the compiler only vectorises when it may ignore FP traps.

namespace mlip::models {
namespace {

inline double as_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
inline uint64_t as_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

/// Branch-free tanh: Cephes' rational approximation for |x| < 0.625, else
/// sign(x) (1 - 2 / (exp(2|x|) + 1)) with exp by range reduction (n ln 2 + r, |r| <= ln2 / 2),
/// a degree-13 Taylor polynomial and 2^n from the exponent bits. One division either way.
inline double tanh_one(double v) {
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

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) void tanh_inplace(double* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) x[k] = tanh_one(x[k]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void tanh_inplace(float* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) x[k] = float(tanh_one(double(x[k])));
}

}  // namespace mlip::models
