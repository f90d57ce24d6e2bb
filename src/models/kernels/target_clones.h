#pragma once

// The CPU kernels' way to vectorise without -march=native: a kernel's loop body is a function
// inlined (MLIP_INLINE) into small wrappers compiled once per instruction set (MLIP_CLONES,
// GCC's target_clones), of which the loader picks the best the CPU has.
#define MLIP_INLINE inline __attribute__((always_inline))
#define MLIP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
