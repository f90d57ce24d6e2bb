#pragma once
// Which kernels the process's BLAS runs, and a repair for OpenBLAS builds that do not know the
// CPU (docs/device.md "The BLAS kernels on a CPU OpenBLAS does not know").
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's, and so the LibTorch that Debian ships) chooses its
// kernels once, when it loads, from the CPU's family and model. A model newer than the release
// (Debian 12's 0.3.21 on an Intel Xeon of family 6, model 207) falls back to the Prescott
// kernels, SSE3 only: on such a CPU every matrix product of mlip ran at a quarter of the vector
// width, and training steps took 1.5-2.4x as long.

#include <string>

namespace mlip::compat {

/// The BLAS of this process, as seen through the symbols it exports.
struct BlasKernels {
  /// openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64";
  /// empty when no OpenBLAS is loaded (pip's LibTorch calls MKL).
  std::string config;
  /// openblas_get_corename(): the kernels in use, e.g. "Prescott", "Haswell", "SkylakeX", "Zen";
  /// empty when no OpenBLAS is loaded.
  std::string core;
  /// Whether OpenBLAS can change its kernels while the process runs (a DYNAMIC_ARCH build).
  bool switchable = false;
};

/// What the process's OpenBLAS runs now.
BlasKernels blas_kernels();

/// The OpenBLAS kernels that this CPU's vector instructions allow: "SkylakeX" with AVX-512
/// (F, CD, BW, DQ, VL, enabled by the operating system), "Haswell" with AVX2 and FMA, empty
/// otherwise (nothing to gain over what OpenBLAS chooses for older CPUs).
std::string cpu_blas_core();

/// Whether `core`, an OpenBLAS core name, lacks AVX2 (Prescott, Core2, Nehalem, Sandybridge, ...).
bool core_lacks_avx2(const std::string& core);

/// What use_the_cpus_blas_kernels() did.
struct BlasKernelChoice {
  std::string before;  ///< the core OpenBLAS had chosen ("" without OpenBLAS)
  std::string after;   ///< the core in use afterwards
  /// Why nothing changed, or what did, in one line for the log.
  std::string note;
  bool switched = false;
};

/// Call before any matrix product (first thing in main(), or when LAMMPS creates the pair
/// style). Where the process's OpenBLAS is a DYNAMIC_ARCH build running kernels without AVX2
/// on a CPU that has AVX2 (or AVX-512), switches it to cpu_blas_core() by re-running its own
/// start-up with OPENBLAS_CORETYPE set. Does nothing when the user set OPENBLAS_CORETYPE (that
/// choice is kept), when no OpenBLAS is loaded, or when its kernels already use AVX2. Not safe
/// while another thread computes a matrix product.
BlasKernelChoice use_the_cpus_blas_kernels();

/// One line for logs: the kernels in use and, after use_the_cpus_blas_kernels(), what it did.
std::string blas_kernels_note();

/// For tests: makes OpenBLAS run `core`'s kernels (as OPENBLAS_CORETYPE=core would at start-up);
/// returns the core in use afterwards, empty without a switchable OpenBLAS.
std::string set_openblas_core(const std::string& core);

}  // namespace mlip::compat
