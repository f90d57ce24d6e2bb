#pragma once
// The places where the two LibTorch versions mlip builds against differ in API: Debian's 1.13
// (the default build) and PyTorch 2.x's (the pip/CUDA build). Code elsewhere calls these and
// never tests the version itself (docs/device.md "Two LibTorch builds, one source").

#include <torch/version.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_mul.h>

#include <cstdlib>
#include <string>
#if TORCH_VERSION_MAJOR < 2
#include <c10/util/string_utils.h>
#endif

namespace mlip::compat {

/// The LibTorch this build was compiled against, e.g. "2.11.0".
inline std::string libtorch_version() { return TORCH_VERSION; }

/// The key of parameter `p` in torch::optim::Optimizer::state(): the address of its TensorImpl,
/// as text in 1.13 (std::string keys), as the pointer itself in 2.x (void* keys).
inline auto optimizer_state_key(const at::Tensor& p) {
#if TORCH_VERSION_MAJOR < 2
  return c10::guts::to_string(p.unsafeGetTensorImpl());
#else
  return static_cast<void*>(p.unsafeGetTensorImpl());
#endif
}

/// Whether LibTorch's multi-tensor product takes a tensor as its scalar (2.x), so that
/// foreach_mul_by_tensor_ is one operation for any number of tensors.
constexpr bool kForeachMulTakesATensor = TORCH_VERSION_MAJOR >= 2;

/// list[k] *= scalar for every k, `scalar` a 0-dim tensor on the list's device, read there (so
/// that a CUDA graph replays it with each step's value). 2.x: one multi-tensor operation (one
/// launch on a GPU for the whole list); 1.13, which lacks that overload: one mul_ per tensor.
inline void foreach_mul_by_tensor_(at::TensorList list, const at::Tensor& scalar) {
#if TORCH_VERSION_MAJOR < 2
  for (const at::Tensor& t : list) const_cast<at::Tensor&>(t).mul_(scalar);
#else
  at::_foreach_mul_(list, scalar);
#endif
}

/// Call first thing in main(), before LibTorch computes anything. pip's LibTorch does its
/// matrix products with MKL, whose results depend in the last bit on the operands' memory
/// alignment unless conditional numerical reproducibility is on: a --restart (fresh
/// allocations) then does not continue bit for bit. MKL_CBWR=AUTO,STRICT (read by MKL when it
/// starts; a value the user set is kept) makes them reproducible. Debian's LibTorch calls
/// OpenBLAS, which ignores the variable.
inline void make_blas_reproducible() { ::setenv("MKL_CBWR", "AUTO,STRICT", /*overwrite=*/0); }

}  // namespace mlip::compat
