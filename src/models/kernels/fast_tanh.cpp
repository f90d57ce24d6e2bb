#include "models/kernels/fast_tanh.h"

#include "models/kernels/fast_tanh_impl.h"

// Compiled with -fno-trapping-math (src/models/CMakeLists.txt): both branches below are
// evaluated and blended, which the compiler only vectorises when it may ignore FP traps.

namespace mlip::models {

using detail::tanh_value;

__attribute__((target_clones("avx512f", "avx2", "default"))) void tanh_inplace(double* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) x[k] = tanh_value(x[k]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void tanh_inplace(float* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k) x[k] = tanh_value(x[k]);
}

}  // namespace mlip::models
