#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace mlip::models {

/// Most neighbour types the environment matrix handles.
inline constexpr int kMaxNeighborTypes = 128;

/// One pair's row of the se_e2_a environment matrix and its derivative (docs/se_e2_a.md):
/// R = (s, s·d/r) with s = w(r)/r and the smooth switch w, and dR/dd [4][3]. d: the pair vector
/// (Å), r = |d| < rc; inv_width = 1 / (rc - rs).
template <typename Real>
KOKKOS_INLINE_FUNCTION void env_row(const Real d[3], Real r, Real rc, Real rs, Real inv_width, Real row[4],
                                    Real drow[4][3]) {
  Real w, dw;
  if (r < rs) {
    w = 1;
    dw = 0;
  } else {
    // w = u^3 (-6u^2 + 15u - 10) + 1 = v^3 (10 - 15v + 6v^2), v = 1 - u (no cancellation).
    const Real u = (r - rs) * inv_width, v = (rc - r) * inv_width;
    w = v * v * v * (Real(10) - Real(15) * v + Real(6) * v * v);
    dw = Real(-30) * u * u * v * v * inv_width;
  }
  const Real inv_r = Real(1) / r;
  const Real sw = w * inv_r;                       // s = w / r
  const Real ds = dw * inv_r - w * inv_r * inv_r;  // ds/dr
  const Real q = sw * inv_r;                       // q = w / r^2
  const Real dq = dw * inv_r * inv_r - Real(2) * w * inv_r * inv_r * inv_r;
  row[0] = sw;
  for (int b = 0; b < 3; ++b) drow[0][b] = ds * d[b] * inv_r;
  for (int a = 0; a < 3; ++a) {
    row[a + 1] = q * d[a];
    for (int b = 0; b < 3; ++b) drow[a + 1][b] = dq * d[b] * inv_r * d[a] + (a == b ? q : Real(0));
  }
}

/// Chooses centre i's neighbours (docs/se_e2_a.md "Slots"): per neighbour type t, the nearest
/// sel[t] pairs within rc, sorted by (distance, j, shift) (an insertion sort, so the order does
/// not depend on the list's). Writes pair indices p into slot[block_start[t] + k] for
/// k < fill[t]; counts the blocks that had more neighbours than sel (truncated) and the pairs
/// left out (dropped). List: a data::NeighborList's host Views (offsets, neighbor, shift,
/// distance); Types: type of atom j; ntypes <= kMaxNeighborTypes.
template <class Offsets, class Neighbor, class Shift, class Distance, class Types, class Start, typename Real>
KOKKOS_INLINE_FUNCTION void select_neighbors(int64_t i, const Offsets& offsets, const Neighbor& neighbor,
                                             const Shift& shift, const Distance& distance, const Types& type_of,
                                             const Start& block_start, int ntypes, Real rc, int64_t* slot,
                                             int64_t* fill, int64_t& truncated, int64_t& dropped) {
  int64_t over[kMaxNeighborTypes];
  for (int t = 0; t < ntypes; ++t) fill[t] = over[t] = 0;
  auto less = [&](int64_t a, int64_t b) {
    if (distance(a) != distance(b)) return distance(a) < distance(b);
    if (neighbor(a) != neighbor(b)) return neighbor(a) < neighbor(b);
    for (int k = 0; k < 3; ++k)
      if (shift(a, k) != shift(b, k)) return shift(a, k) < shift(b, k);
    return false;
  };
  for (int64_t p = offsets(i); p < offsets(i + 1); ++p) {
    if (!(distance(p) < rc)) continue;
    const int t = type_of(neighbor(p));
    const int64_t base = block_start(t), cap = block_start(t + 1) - base;
    int64_t n = fill[t];
    if (n == cap) {
      ++over[t];
      ++dropped;
      if (cap == 0 || !less(p, slot[base + cap - 1])) continue;
      n = cap - 1;  // the farthest kept one is dropped instead
    } else {
      ++fill[t];
    }
    int64_t k = n;
    while (k > 0 && less(p, slot[base + k - 1])) {
      slot[base + k] = slot[base + k - 1];
      --k;
    }
    slot[base + k] = p;
  }
  for (int t = 0; t < ntypes; ++t) truncated += over[t] > 0;
}

}  // namespace mlip::models
