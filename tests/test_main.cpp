#include <gtest/gtest.h>

#include <cstdlib>

#include "data/kokkos_runtime.h"

int main(int argc, char** argv) {
  // As mlip's own main (compat::make_blas_reproducible in src/compat/libtorch.h): MKL's results
  // independent of memory alignment, in the pip build.
  ::setenv("MKL_CBWR", "AUTO,STRICT", 0);
  ::testing::InitGoogleTest(&argc, argv);
  mlip::data::ensure_kokkos_initialized();
  return RUN_ALL_TESTS();
}
