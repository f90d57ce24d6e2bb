// MLIP_HOST_DEVICE: a function compiled for both the host and a CUDA device when nvcc compiles
// it, a plain host function otherwise. The arithmetic of mlip's CUDA kernels is written once
// this way, so that their host twins run the very code the GPU runs (docs/fused_kernels.md).
#pragma once

#if defined(__CUDACC__)
#define MLIP_HOST_DEVICE __host__ __device__
#else
#define MLIP_HOST_DEVICE
#endif
