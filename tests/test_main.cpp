#include <gtest/gtest.h>

#include "data/kokkos_runtime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mlip::data::ensure_kokkos_initialized();
  return RUN_ALL_TESTS();
}
