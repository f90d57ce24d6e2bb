// A row's sums over the channels, kept in vector registers while a kernel adds term after term
// into them (docs/equivariant.md "The training path"): the equivariant model's CPU kernels
// (message_contraction.cpp, product_basis.cpp) sum each output row over its terms this way and
// write it once, instead of loading and storing the row for every term.
#pragma once

#include <algorithm>
#include <cstdint>

#include "models/kernels/target_clones.h"

namespace mlip::models {

/// Channels summed at once: 256 bytes (64 float32, 32 float64), eight vectors of 32 bytes (GCC's
/// vector extension: one AVX2 register each, or two SSE registers in the default clone of
/// target_clones; the AVX-512 clone uses them as AVX2 registers too); the last chunk of a row may
/// be shorter.
template <typename T>
constexpr int64_t kChunk = 256 / int64_t(sizeof(T));

template <typename T>
struct Vector32 {
  typedef T type __attribute__((vector_size(32)));
  /// The same read from or written to any address of a T (unaligned).
  typedef T unaligned __attribute__((vector_size(32), aligned(sizeof(T)), may_alias));
};

/// The sums of one output row over the channels [c0, c0 + width) of a chunk. Width = kChunk<T>:
/// a full chunk, in eight vector registers; Width = 0: the shorter last chunk (scalar loops,
/// `width` channels). Each channel's sum is formed in the order of the calls, with the products
/// multiplied left to right: the bits of `out[c] += c · x[c] · y[c]` term after term.
template <typename T, int64_t Width>
struct ChunkSum {
  using V = typename Vector32<T>::type;
  using U = typename Vector32<T>::unaligned;
  static constexpr int64_t kLanes = int64_t(sizeof(V) / sizeof(T));
  static constexpr int kVectors = int(kChunk<T> / kLanes);
  V v[kVectors] = {};

  explicit ChunkSum(int64_t /*width*/) {}
  /// sum = in[0 .. kChunk)
  MLIP_INLINE void load(const T* in) {
    for (int k = 0; k < kVectors; ++k) v[k] = *reinterpret_cast<const U*>(in + k * kLanes);
  }
  /// sum += c · x1 · x2 · ... (each an operand row's chunk)
  template <typename... Rows>
  MLIP_INLINE void add_product(T c, const Rows*... x) {
    for (int k = 0; k < kVectors; ++k) v[k] += (c * ... * *reinterpret_cast<const U*>(x + k * kLanes));
  }
  MLIP_INLINE void add(const ChunkSum& other) {
    for (int k = 0; k < kVectors; ++k) v[k] += other.v[k];
  }
  MLIP_INLINE void store(T* out) const {
    for (int k = 0; k < kVectors; ++k) *reinterpret_cast<U*>(out + k * kLanes) = v[k];
  }
};

template <typename T>
struct ChunkSum<T, 0> {
  T v[kChunk<T>] = {};
  int64_t width;

  explicit ChunkSum(int64_t w) : width(w) {}
  MLIP_INLINE void load(const T* in) { std::copy(in, in + width, v); }
  template <typename... Rows>
  MLIP_INLINE void add_product(T c, const Rows*... x) {
    for (int64_t k = 0; k < width; ++k) v[k] += (c * ... * x[k]);
  }
  MLIP_INLINE void add(const ChunkSum& other) {
    for (int64_t k = 0; k < width; ++k) v[k] += other.v[k];
  }
  MLIP_INLINE void store(T* out) const { std::copy(v, v + width, out); }
};

}  // namespace mlip::models

/// Calls row_function<T, Width>(args..., c0, width) for the chunks of f channels: the full ones
/// (Width = kChunk<T>, a compile-time width), then the rest (Width 0).
#define MLIP_OVER_CHUNKS(T, f, row_function, ...)                                  \
  do {                                                                             \
    int64_t c0_ = 0;                                                               \
    for (; c0_ + kChunk<T> <= (f); c0_ += kChunk<T>)                               \
      row_function<T, kChunk<T>>(__VA_ARGS__, c0_, kChunk<T>);                     \
    if (c0_ < (f)) row_function<T, 0>(__VA_ARGS__, c0_, (f) - c0_);                \
  } while (0)
