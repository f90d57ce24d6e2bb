#include "data/kokkos_runtime.h"

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <mutex>

namespace mlip::data {

void ensure_kokkos_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      std::atexit([] {
        if (Kokkos::is_initialized()) Kokkos::finalize();
      });
    }
  });
}

std::mutex& kokkos_mutex() {
  static std::mutex m;
  return m;
}

const char* kokkos_execution_space_name() { return Kokkos::DefaultExecutionSpace::name(); }

}  // namespace mlip::data
