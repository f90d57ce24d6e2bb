// The fused embedding kernel (docs/fused_kernels.md): one launch runs a tile of pairs through
// every layer of an embedding net with the derivative d/ds carried along, the rows of the tile
// held in shared memory between layers; the arithmetic is fused_neuron's, shared with the
// host twin that the CPU tests check.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "error.h"
#include "models/se_e2_a/fused_embedding_cuda.h"

namespace mlip::models {
namespace {

constexpr int kThreads = 128;
constexpr int kSharedBytes = 40 * 1024;  // under the 48 KiB every device gives without opting in

/// Pairs per block: as many as `buffers` buffers of [pairs, 2, max_width] rows fit, at most 32.
template <typename R>
int tile_pairs(int max_width, int buffers) {
  const int fit = kSharedBytes / int(buffers * 2 * max_width * sizeof(R));
  return std::max(1, std::min(32, fit));
}

/// Lets `kernel` use `shared` bytes of dynamic shared memory when that is beyond the 48 KiB
/// given without asking (float64 nets over 1,024 wide; H100 and H200 allow 227 KiB a block).
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t shared) {
  if (shared <= 48 * 1024) return;
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
  if (status != cudaSuccess)
    throw Error(
        "the fused embedding kernels need " + std::to_string(shared) +
        " bytes of shared memory per block (a net this wide), which this GPU refuses: " + cudaGetErrorString(status));
}

void check_launch(const char* kernel, int64_t q, int64_t blocks, int tile) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error(std::string("the ") + kernel + " kernel did not launch (" + std::to_string(q) + " pairs, " +
                std::to_string(blocks) + " blocks of " + std::to_string(tile) + "): " + cudaGetErrorString(status));
}

/// The first rows of this block's tile of pairs: each pair's input s and its derivative 1, in
/// `rows` (a pair's row: `width` values, then `width` derivatives). Returns the tile's pairs.
template <typename R>
__device__ int load_tile(const R* __restrict__ s, int64_t stride, int64_t q, int tile, int width, R* rows) {
  const int64_t first = int64_t(blockIdx.x) * tile;
  const int count = int(min(int64_t(tile), q - first));
  for (int p = threadIdx.x; p < count; p += blockDim.x) {
    rows[p * 2 * width] = s[(first + p) * stride];
    rows[p * 2 * width + width] = R(1);
  }
  __syncthreads();
  return count;
}

template <typename R>
__global__ void fused_embedding_kernel(FusedNet<R> net, const R* __restrict__ s, int64_t stride, int64_t q, int tile,
                                       R* __restrict__ g, R* __restrict__ slope) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int width = net.max_width, row = 2 * width;  // a pair's row: values, then derivatives
  R* current = reinterpret_cast<R*>(shared_bytes);
  R* next = current + tile * row;
  const int64_t first = int64_t(blockIdx.x) * tile;
  const int count = load_tile(s, stride, q, tile, width, current);
  for (int l = 0; l < net.layers; ++l) {
    const int out = net.out[l];
    const bool last = l + 1 == net.layers;
    for (int k = threadIdx.x; k < count * out; k += blockDim.x) {
      const int p = k / out, o = k - p * out;
      R v, t;
      fused_neuron(net, l, current + p * row, current + p * row + width, o, &v, &t);
      if (last) {
        g[(first + p) * out + o] = v;
        slope[(first + p) * out + o] = t;
      } else {
        next[p * row + o] = v;
        next[p * row + width + o] = t;
      }
    }
    __syncthreads();
    R* swap = current;
    current = next;
    next = swap;
  }
}

/// The adjoint of fused_embedding_kernel for a tile of pairs: the forward again, each layer's
/// input rows written to the scratch, then the layers in reverse: d loss / dz, dzt (and the idt
/// shares) of each neuron, then d loss / d(input row), three shared buffers of rows.
template <typename R>
__global__ void fused_embedding_adjoint_kernel(FusedNet<R> net, const R* __restrict__ s, int64_t stride, int64_t q,
                                               int tile, const R* __restrict__ grad_value,
                                               const R* __restrict__ grad_slope, FusedAdjointScratch<R> scratch,
                                               R* __restrict__ input_gradient) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int width = net.max_width, row = 2 * width;
  R* current = reinterpret_cast<R*>(shared_bytes);
  R* next = current + tile * row;
  R* zrows = next + tile * row;
  const int64_t first = int64_t(blockIdx.x) * tile;
  const int count = load_tile(s, stride, q, tile, width, current);
  for (int l = 0; l < net.layers; ++l) {  // the forward, keeping each layer's input rows
    const int in = net.in[l], out = net.out[l];
    for (int k = threadIdx.x; k < count * in; k += blockDim.x) {
      const int p = k / in, i = k - p * in;
      R* kept = scratch.inputs[l] + (first + p) * 2 * in;
      kept[i] = current[p * row + i];
      kept[in + i] = current[p * row + width + i];
    }
    if (l + 1 < net.layers) {
      for (int k = threadIdx.x; k < count * out; k += blockDim.x) {
        const int p = k / out, o = k - p * out;
        fused_neuron(net, l, current + p * row, current + p * row + width, o, next + p * row + o,
                     next + p * row + width + o);
      }
    }
    __syncthreads();
    R* swap = current;
    current = next;
    next = swap;
  }
  const int m = net.out[net.layers - 1];
  for (int k = threadIdx.x; k < count * m; k += blockDim.x) {
    const int p = k / m, o = k - p * m;
    current[p * row + o] = grad_value[(first + p) * m + o];
    current[p * row + width + o] = grad_slope[(first + p) * m + o];
  }
  __syncthreads();
  for (int l = net.layers - 1; l >= 0; --l) {  // current: d loss / d(layer output rows)
    const int in = net.in[l], out = net.out[l];
    for (int k = threadIdx.x; k < count * out; k += blockDim.x) {
      const int p = k / out, o = k - p * out;
      const R* x = scratch.inputs[l] + (first + p) * 2 * in;
      R zb, ztb, share;
      fused_neuron_adjoint(net, l, x, x + in, o, current[p * row + o], current[p * row + width + o], &zb, &ztb, &share);
      zrows[p * row + o] = zb;
      zrows[p * row + width + o] = ztb;
      R* zbar = scratch.zbar[l] + (first + p) * 2 * out;
      zbar[o] = zb;
      zbar[out + o] = ztb;
      if (scratch.idt_share[l] != nullptr) scratch.idt_share[l][(first + p) * out + o] = share;
    }
    __syncthreads();
    for (int k = threadIdx.x; k < count * in; k += blockDim.x) {
      const int p = k / in, i = k - p * in;
      R xb, xtb;
      fused_input_adjoint(net, l, zrows + p * row, zrows + p * row + width, current + p * row,
                          current + p * row + width, i, &xb, &xtb);
      next[p * row + i] = xb;
      next[p * row + width + i] = xtb;
      if (l == 0 && input_gradient != nullptr) input_gradient[first + p] = xb;  // in = 1: d loss / ds
    }
    __syncthreads();
    R* swap = current;
    current = next;
    next = swap;
  }
}

}  // namespace

template <typename R>
void launch_fused_embedding(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, R* g, R* slope,
                            void* stream) {
  if (q == 0) return;
  const int tile = tile_pairs<R>(net.max_width, 2);
  const int64_t blocks = (q + tile - 1) / tile;
  const size_t shared = size_t(2 * tile * 2 * net.max_width) * sizeof(R);
  allow_shared_memory(fused_embedding_kernel<R>, shared);
  fused_embedding_kernel<R>
      <<<unsigned(blocks), kThreads, shared, static_cast<cudaStream_t>(stream)>>>(net, s, stride, q, tile, g, slope);
  check_launch("fused embedding", q, blocks, tile);
}

template <typename R>
void launch_fused_embedding_adjoint(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, const R* grad_value,
                                    const R* grad_slope, const FusedAdjointScratch<R>& scratch, R* input_gradient,
                                    void* stream) {
  if (q == 0) return;
  const int tile = tile_pairs<R>(net.max_width, 3);
  const int64_t blocks = (q + tile - 1) / tile;
  const size_t shared = size_t(3 * tile * 2 * net.max_width) * sizeof(R);
  allow_shared_memory(fused_embedding_adjoint_kernel<R>, shared);
  fused_embedding_adjoint_kernel<R><<<unsigned(blocks), kThreads, shared, static_cast<cudaStream_t>(stream)>>>(
      net, s, stride, q, tile, grad_value, grad_slope, scratch, input_gradient);
  check_launch("fused embedding adjoint", q, blocks, tile);
}

template void launch_fused_embedding<float>(const FusedNet<float>&, const float*, int64_t, int64_t, float*, float*,
                                            void*);
template void launch_fused_embedding<double>(const FusedNet<double>&, const double*, int64_t, int64_t, double*, double*,
                                             void*);
template void launch_fused_embedding_adjoint<float>(const FusedNet<float>&, const float*, int64_t, int64_t,
                                                    const float*, const float*, const FusedAdjointScratch<float>&,
                                                    float*, void*);
template void launch_fused_embedding_adjoint<double>(const FusedNet<double>&, const double*, int64_t, int64_t,
                                                     const double*, const double*, const FusedAdjointScratch<double>&,
                                                     double*, void*);

}  // namespace mlip::models
