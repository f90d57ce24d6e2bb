#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "app/cli.h"
#include "compat/blas_kernels.h"
#include "compat/libtorch.h"

int main(int argc, char** argv) {
  mlip::compat::make_blas_reproducible();
  // Before any matrix product: an OpenBLAS that does not know this CPU runs SSE3 kernels on it
  // (docs/device.md "The BLAS kernels on a CPU OpenBLAS does not know").
  mlip::compat::use_the_cpus_blas_kernels();
#if defined(__GLIBC__)
  // Training allocates and frees the same large tensors every step. By default glibc serves
  // them with mmap and unmaps them on free, so every step faults in freshly zeroed pages (a
  // sixth of a water training step). Keep freed memory in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
  std::vector<std::string> args(argv + 1, argv + argc);
  return mlip::app::run_cli(args);
}
