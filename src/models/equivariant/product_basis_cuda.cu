// The product basis's kernel (docs/fused_kernels.md "The product basis"): a partial of a
// product of one to three messages in one launch, each output element summed over its terms in
// a register and written once (no per-term tensors, no atomics). The arithmetic is
// product_rule.h's, shared with the host twin that the CPU tests check.
#include <string>

#include "models/equivariant/product_basis_cuda.h"
#include "models/kernels/cuda_grid.h"

namespace mlip::models {
namespace {

/// Element k of out [nodes, out_rows, f], one thread each; consecutive threads take consecutive
/// channels, so a warp reads consecutive operand values.
template <typename T>
__global__ void product_kernel(ProductRuleArgs<T> a, int64_t nodes, int64_t out_rows, T* __restrict__ out,
                               bool accumulate) {
  const int64_t total = nodes * out_rows * a.f;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = k % a.f, rest = k / a.f, r = rest % out_rows, n = rest / out_rows;
    const T value = product_element(a, n, r, c);
    out[k] = accumulate ? out[k] + value : value;
  }
}

}  // namespace

template <typename T>
void launch_product_basis(const ProductRuleArgs<T>& args, int64_t nodes, int64_t out_rows, T* out, bool accumulate,
                          void* stream) {
  const int64_t total = nodes * out_rows * args.f;
  if (total == 0) return;
  const int64_t blocks = grid_blocks(total);
  product_kernel<T><<<unsigned(blocks), kGridThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, nodes, out_rows,
                                                                                              out, accumulate);
  check_grid_launch("product basis", std::to_string(nodes) + " nodes", blocks);
}

template void launch_product_basis<float>(const ProductRuleArgs<float>&, int64_t, int64_t, float*, bool, void*);
template void launch_product_basis<double>(const ProductRuleArgs<double>&, int64_t, int64_t, double*, bool, void*);

}  // namespace mlip::models
