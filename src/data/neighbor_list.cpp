#include "data/neighbor_list.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <vector>

#include "data/kokkos_runtime.h"
#include "error.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mlip::data {
namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

/// Asks Linux for transparent huge pages on a large, not yet touched host allocation: the
/// first touch then faults in 2 MiB at a time instead of 4 KiB (a quarter of the build time of
/// a large list went to page faults). No-op elsewhere or for small or device allocations.
template <class View>
void advise_huge_pages(const View& v) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (!std::is_same<typename View::memory_space, Kokkos::HostSpace>::value) return;
  const size_t bytes = v.span() * sizeof(typename View::value_type);
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  if (bytes < 4 * kHuge) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(v.data()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(v.data()) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)v;
#endif
}

double det3(const Mat3& m) {
  return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
         m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
         m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

std::array<double, 3> cross(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

double norm(const std::array<double, 3>& a) { return std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]); }

Mat3 inverse3(const Mat3& m) {
  double d = det3(m);
  Mat3 r;
  r[0][0] = (m[1][1] * m[2][2] - m[1][2] * m[2][1]) / d;
  r[0][1] = (m[0][2] * m[2][1] - m[0][1] * m[2][2]) / d;
  r[0][2] = (m[0][1] * m[1][2] - m[0][2] * m[1][1]) / d;
  r[1][0] = (m[1][2] * m[2][0] - m[1][0] * m[2][2]) / d;
  r[1][1] = (m[0][0] * m[2][2] - m[0][2] * m[2][0]) / d;
  r[1][2] = (m[0][2] * m[1][0] - m[0][0] * m[1][2]) / d;
  r[2][0] = (m[1][0] * m[2][1] - m[1][1] * m[2][0]) / d;
  r[2][1] = (m[0][1] * m[2][0] - m[0][0] * m[2][1]) / d;
  r[2][2] = (m[0][0] * m[1][1] - m[0][1] * m[1][0]) / d;
  return r;
}

/// The frame the cell list works in: rows are the three directions. For periodic directions it
/// is the given cell vector; a non-periodic direction keeps its cell vector when the cell is
/// regular, else gets a unit vector orthogonal to the periodic ones.
Mat3 working_frame(const double* cell, std::array<bool, 3> pbc) {
  Mat3 h{};
  bool any_pbc = pbc[0] || pbc[1] || pbc[2];
  if (!cell) {
    if (any_pbc) throw Error("neighbour list: a periodic direction needs a cell, got none");
    for (int d = 0; d < 3; ++d) h[d][d] = 1.0;
    return h;
  }
  double scale = 0.0;
  for (int d = 0; d < 3; ++d) {
    for (int k = 0; k < 3; ++k) {
      h[d][k] = cell[3 * d + k];
      if (!std::isfinite(h[d][k])) throw Error("neighbour list: cell has a non-finite entry");
    }
    scale = std::max(scale, norm(h[d]));
  }
  double vol = std::abs(det3(h));
  if (scale > 0 && vol > 1e-10 * scale * scale * scale) return h;
  if (!any_pbc) {
    Mat3 id{};
    for (int d = 0; d < 3; ++d) id[d][d] = 1.0;
    return id;
  }
  // Singular cell: rebuild the non-periodic rows by Gram-Schmidt against the periodic ones.
  std::vector<std::array<double, 3>> basis;
  for (int d = 0; d < 3; ++d) {
    if (!pbc[d]) continue;
    std::array<double, 3> v = h[d];
    for (auto& b : basis) {
      double p = v[0] * b[0] + v[1] * b[1] + v[2] * b[2];
      for (int k = 0; k < 3; ++k) v[k] -= p * b[k];
    }
    double n = norm(v);
    if (!(n > 1e-10 * std::max(scale, 1e-300))) {
      std::ostringstream msg;
      msg << "neighbour list: singular cell (periodic cell vector " << d
          << " is zero or parallel to another one)";
      throw Error(msg.str());
    }
    for (int k = 0; k < 3; ++k) v[k] /= n;
    basis.push_back(v);
  }
  for (int d = 0; d < 3; ++d) {
    if (pbc[d]) continue;
    // Pick the unit axis least aligned with the basis found so far.
    std::array<double, 3> best{};
    double best_n = -1.0;
    for (int a = 0; a < 3; ++a) {
      std::array<double, 3> v{};
      v[a] = 1.0;
      for (auto& b : basis) {
        double p = v[0] * b[0] + v[1] * b[1] + v[2] * b[2];
        for (int k = 0; k < 3; ++k) v[k] -= p * b[k];
      }
      double n = norm(v);
      if (n > best_n) {
        best_n = n;
        best = v;
      }
    }
    for (int k = 0; k < 3; ++k) best[k] /= best_n;
    basis.push_back(best);
    h[d] = best;
  }
  return h;
}

/// Minimum of |u H| over the box lo <= u <= hi (u a row vector of fractional coordinates):
/// the exact smallest distance between two bins of the cell list. Enumerates the 27 active
/// sets of the box-constrained quadratic; each feasible stationary point is a candidate.
double min_box_distance(const Mat3& h, const std::array<double, 3>& lo, const std::array<double, 3>& hi) {
  double g[3][3];
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) g[a][b] = h[a][0] * h[b][0] + h[a][1] * h[b][1] + h[a][2] * h[b][2];
  double best = std::numeric_limits<double>::infinity();
  for (int pattern = 0; pattern < 27; ++pattern) {
    int state[3] = {pattern % 3, (pattern / 3) % 3, pattern / 9};  // 0 free, 1 at lo, 2 at hi
    double u[3] = {0.0, 0.0, 0.0};
    int free_idx[3], nf = 0;
    for (int a = 0; a < 3; ++a) {
      if (state[a] == 0) free_idx[nf++] = a;
      else u[a] = state[a] == 1 ? lo[a] : hi[a];
    }
    // Solve G_ff u_f = -G_fc u_c.
    double a_m[3][3], rhs[3];
    for (int r = 0; r < nf; ++r) {
      rhs[r] = 0.0;
      for (int c = 0; c < 3; ++c)
        if (state[c] != 0) rhs[r] -= g[free_idx[r]][c] * u[c];
      for (int c = 0; c < nf; ++c) a_m[r][c] = g[free_idx[r]][free_idx[c]];
    }
    bool ok = true;
    // Gaussian elimination with partial pivoting on the nf x nf system.
    for (int c = 0; c < nf && ok; ++c) {
      int piv = c;
      for (int r = c + 1; r < nf; ++r)
        if (std::abs(a_m[r][c]) > std::abs(a_m[piv][c])) piv = r;
      if (std::abs(a_m[piv][c]) < 1e-300) {
        ok = false;
        break;
      }
      std::swap(a_m[piv], a_m[c]);
      std::swap(rhs[piv], rhs[c]);
      for (int r = c + 1; r < nf; ++r) {
        double f = a_m[r][c] / a_m[c][c];
        for (int k = c; k < nf; ++k) a_m[r][k] -= f * a_m[c][k];
        rhs[r] -= f * rhs[c];
      }
    }
    if (!ok) continue;
    for (int r = nf - 1; r >= 0; --r) {
      double s = rhs[r];
      for (int k = r + 1; k < nf; ++k) s -= a_m[r][k] * u[free_idx[k]];
      u[free_idx[r]] = s / a_m[r][r];
    }
    for (int r = 0; r < nf; ++r) {
      int a = free_idx[r];
      if (u[a] < lo[a] - 1e-12 || u[a] > hi[a] + 1e-12) ok = false;
    }
    if (!ok) continue;
    double v[3] = {0, 0, 0};
    for (int a = 0; a < 3; ++a)
      for (int k = 0; k < 3; ++k) v[k] += u[a] * h[a][k];
    best = std::min(best, std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
  }
  return best;
}

using ExecSpace = Kokkos::DefaultExecutionSpace;
/// A 3x3 matrix that kernels capture by value.
struct Matrix {
  double m[3][3];
};
using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;
using Scratch = ExecSpace::scratch_memory_space;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

/// The neighbour bins of one bin, with their image offsets: built once per bin in team scratch
/// memory and reused by every atom of the bin.
template <typename Real>
struct BinTable {
  Kokkos::View<int64_t* [2], Kokkos::LayoutRight, Scratch, Unmanaged> range;  // atoms [start, end) of the bin
  Kokkos::View<int32_t* [4], Kokkos::LayoutRight, Scratch, Unmanaged> image;  // shift s, and 1 when s == 0
  Kokkos::View<Real* [3], Kokkos::LayoutRight, Scratch, Unmanaged> offset;    // s * H
  int64_t size = 0;

  static size_t scratch_bytes(int64_t n) {
    return decltype(range)::shmem_size(n) + decltype(image)::shmem_size(n) + decltype(offset)::shmem_size(n);
  }
};

/// The cell-list search, shared by the counting and the filling pass so that both take exactly
/// the same decisions.
template <typename Real>
struct PairSearch {
  Kokkos::View<const Real* [3]> spos;      // wrapped positions, sorted by bin
  Kokkos::View<const int64_t*> bin_start;  // [nbins + 1]
  Kokkos::View<const int32_t* [3]> stencil;
  Real h[3][3];
  int32_t n[3];
  bool periodic[3];
  Real rc2;

  /// Fills the table of the team's bin (league rank) and synchronises the team.
  KOKKOS_INLINE_FUNCTION BinTable<Real> table(const Member& team) const {
    const int64_t ns = stencil.extent(0);
    BinTable<Real> t;
    t.range = decltype(t.range)(team.team_scratch(0), ns);
    t.image = decltype(t.image)(team.team_scratch(0), ns);
    t.offset = decltype(t.offset)(team.team_scratch(0), ns);
    const int32_t b = team.league_rank();
    const int32_t b0 = b / (n[1] * n[2]), b1 = (b / n[2]) % n[1], b2 = b % n[2];
    int64_t size = 0;
    Kokkos::single(
        Kokkos::PerTeam(team),
        [&](int64_t& count) {
          count = 0;
          for (int64_t e = 0; e < ns; ++e) {
            int32_t nb[3] = {b0 + stencil(e, 0), b1 + stencil(e, 1), b2 + stencil(e, 2)};
            int32_t s[3] = {0, 0, 0};
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
              if (periodic[d]) {
                while (nb[d] < 0) nb[d] += n[d], --s[d];
                while (nb[d] >= n[d]) nb[d] -= n[d], ++s[d];
              } else if (nb[d] < 0 || nb[d] >= n[d]) {
                inside = false;
              }
            }
            if (!inside) continue;
            const int32_t nbin = (nb[0] * n[1] + nb[1]) * n[2] + nb[2];
            // Bins consecutive in memory with the same image extend the previous entry (a
            // stencil row along the fastest bin axis becomes one longer loop).
            if (count > 0 && t.range(count - 1, 1) == bin_start(nbin) && t.image(count - 1, 0) == s[0] &&
                t.image(count - 1, 1) == s[1] && t.image(count - 1, 2) == s[2]) {
              t.range(count - 1, 1) = bin_start(nbin + 1);
              continue;
            }
            if (bin_start(nbin) == bin_start(nbin + 1)) continue;  // empty bin
            t.range(count, 0) = bin_start(nbin);
            t.range(count, 1) = bin_start(nbin + 1);
            for (int d = 0; d < 3; ++d) {
              t.image(count, d) = s[d];
              t.offset(count, d) = s[0] * h[0][d] + s[1] * h[1][d] + s[2] * h[2][d];
            }
            t.image(count, 3) = (s[0] == 0 && s[1] == 0 && s[2] == 0) ? 1 : 0;
            ++count;
          }
        },
        size);
    t.size = size;
    team.team_barrier();
    return t;
  }

  /// Number of neighbours of sorted atom k (branch-free; the atom itself, always met once at
  /// zero shift with r2 = 0 exactly, is subtracted).
  KOKKOS_INLINE_FUNCTION int64_t count(const BinTable<Real>& t, int64_t k) const {
    const Real px = spos(k, 0), py = spos(k, 1), pz = spos(k, 2);
    int64_t c = 0;
    for (int64_t e = 0; e < t.size; ++e) {
      const Real ox = t.offset(e, 0) - px, oy = t.offset(e, 1) - py, oz = t.offset(e, 2) - pz;
      const int64_t m_end = t.range(e, 1);
      for (int64_t m = t.range(e, 0); m < m_end; ++m) {
        const Real dx = spos(m, 0) + ox, dy = spos(m, 1) + oy, dz = spos(m, 2) + oz;
        c += (dx * dx + dy * dy + dz * dz < rc2) ? 1 : 0;
      }
    }
    return c - 1;
  }

  /// Writes every neighbour of sorted atom k into the buffers (sorted index and shift into
  /// ibuf, d and r2 into rbuf) without branching on the distance: each candidate is stored and
  /// the cursor advances only for a hit. The buffers have `last + 1` rows; the cursor never
  /// passes `last`, so a disagreement with count() cannot write out of bounds. Returns the
  /// number of hits (count(k) when the passes agree).
  template <class IntBuf, class RealBuf>
  KOKKOS_INLINE_FUNCTION int64_t gather(const BinTable<Real>& t, int64_t k, const IntBuf& ibuf,
                                        const RealBuf& rbuf, int64_t last) const {
    const Real px = spos(k, 0), py = spos(k, 1), pz = spos(k, 2);
    int64_t q = 0;
    for (int64_t e = 0; e < t.size; ++e) {
      const Real ox = t.offset(e, 0) - px, oy = t.offset(e, 1) - py, oz = t.offset(e, 2) - pz;
      const int32_t s0 = t.image(e, 0), s1 = t.image(e, 1), s2 = t.image(e, 2);
      const int64_t self = t.image(e, 3) ? k : -1;
      const int64_t m_end = t.range(e, 1);
      for (int64_t m = t.range(e, 0); m < m_end; ++m) {
        const Real dx = spos(m, 0) + ox, dy = spos(m, 1) + oy, dz = spos(m, 2) + oz;
        const Real r2 = dx * dx + dy * dy + dz * dz;
        ibuf(q, 0) = int32_t(m);
        ibuf(q, 1) = s0;
        ibuf(q, 2) = s1;
        ibuf(q, 3) = s2;
        rbuf(q, 0) = dx;
        rbuf(q, 1) = dy;
        rbuf(q, 2) = dz;
        rbuf(q, 3) = r2;
        q += (r2 < rc2) & (m != self);
        q = q < last ? q : last;
      }
    }
    return q;
  }
};

/// The first n rows of a reusable buffer, grown (by 1/8 extra, uninitialised) when too small.
template <class V>
auto rows(V& buffer, int64_t n, const char* label) {
  if (int64_t(buffer.extent(0)) < n) {
    buffer = V();  // release the old buffer before allocating the new one
    const size_t length = size_t(n + n / 8);
    try {
      buffer = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), length);
    } catch (const std::exception&) {
      // Kokkos' text (its allocator's name, "Traceback functionality not available") is not for users.
      const double bytes = double(length) * double(sizeof(typename V::value_type)) * (V::rank == 2 ? 3.0 : 1.0);
      std::ostringstream msg;
      msg << "neighbour list: out of memory: cannot allocate " << std::setprecision(3) << bytes / double(1 << 30)
          << " GiB for '" << label << "' (" << n << " rows)";
      throw Error(msg.str());
    }
    advise_huge_pages(buffer);
  }
  // The same View type as the buffer (contiguous rows keep the layout; no runtime strides).
  if constexpr (V::rank == 1) return V(buffer, std::make_pair(int64_t(0), n));
  else return V(buffer, std::make_pair(int64_t(0), n), Kokkos::ALL);
}


/// The row-major positions the builder reads, [natoms, 3] Å, as a View over the host pointer.
template <typename Real>
using HostPositions = Kokkos::View<const Real* [3], Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;
using Policy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int64_t>>;

/// Throws mlip::Error for a cutoff that is not positive and finite, an atom count outside
/// [0, 2^31), or more centres than atoms (centres already defaulted to natoms).
void check_build_arguments(int64_t natoms, int64_t centres, double cutoff) {
  if (!(cutoff > 0.0) || !std::isfinite(cutoff)) {
    std::ostringstream msg;
    msg << "neighbour list: expected a positive cutoff, got " << cutoff;
    throw Error(msg.str());
  }
  if (natoms < 0 || natoms > std::numeric_limits<int32_t>::max())
    throw Error("neighbour list: number of atoms out of range");
  if (centres > natoms) throw Error("neighbour list: more centres than atoms");
}

/// The distance between the two faces of the cell (rows of h) across each direction, Å.
std::array<double, 3> face_distances(const Mat3& h) {
  const double vol = std::abs(det3(h));
  std::array<double, 3> height;
  for (int d = 0; d < 3; ++d) height[d] = vol / norm(cross(h[(d + 1) % 3], h[(d + 2) % 3]));
  return height;
}

/// Fills frac [natoms, 3] with the fractional coordinates r * hinv of the positions pos
/// [natoms, 3] Å (any memory space), wrapped into [0, 1) along periodic directions, and wrap
/// [natoms, 3] with the whole cells added by the wrapping (r + wrap * H is the wrapped position).
/// Throws mlip::Error naming the first atom (as given in `positions`, the host copy) that is not
/// finite or lies more than 10000 cells away.
template <typename Real, class PositionView>
void wrap_into_cell(const PositionView& pos, const Real* positions, const Mat3& hinv, std::array<bool, 3> pbc,
                    const Kokkos::View<double* [3]>& frac, const Kokkos::View<int32_t* [3]>& wrap) {
  const int64_t natoms = int64_t(frac.extent(0));
  Matrix hinv_k;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) hinv_k.m[a][b] = hinv[a][b];
  const bool per0 = pbc[0], per1 = pbc[1], per2 = pbc[2];
  int64_t first_bad = natoms;
  Kokkos::parallel_reduce(
      "mlip::nl::fractional", Policy(0, natoms),
      KOKKOS_LAMBDA(int64_t i, int64_t & bad) {
        const double p[3] = {double(pos(i, 0)), double(pos(i, 1)), double(pos(i, 2))};
        const bool periodic[3] = {per0, per1, per2};
        bool ok = true;
        for (int d = 0; d < 3; ++d) {
          double s = p[0] * hinv_k.m[0][d] + p[1] * hinv_k.m[1][d] + p[2] * hinv_k.m[2][d];
          int32_t w = 0;
          if (!(s > -1e300 && s < 1e300)) {  // NaN or Inf
            ok = false;
            s = 0;
          } else if (periodic[d]) {
            const double k = Kokkos::Experimental::floor(s);
            if (k > 10000.0 || k < -10000.0) ok = false;
            else {
              s -= k;
              if (s >= 1.0) s = 0.0;  // s just below 0 rounds up to 1
              w = -int32_t(k);
            }
          }
          frac(i, d) = s;
          wrap(i, d) = w;
        }
        if (!ok && i < bad) bad = i;
      },
      Kokkos::Min<int64_t>(first_bad));
  if (first_bad < natoms) {
    std::ostringstream msg;
    msg << "neighbour list: atom " << first_bad << " (" << positions[3 * first_bad] << ", "
        << positions[3 * first_bad + 1] << ", " << positions[3 * first_bad + 2]
        << ") is not finite or lies more than 10000 cell lengths away from the cell";
    throw Error(msg.str());
  }
}

/// The fractional extent the bins cover along each direction: [0, 1] along periodic directions,
/// the atoms' smallest and largest fractional coordinate along the others.
struct FractionalExtent {
  double low[3] = {0, 0, 0};
  double high[3] = {1, 1, 1};
};

/// The extent of the fractional coordinates frac [natoms, 3] (see FractionalExtent).
FractionalExtent fractional_extent(const Kokkos::View<double* [3]>& frac, std::array<bool, 3> pbc) {
  const int64_t natoms = int64_t(frac.extent(0));
  FractionalExtent extent;
  for (int d = 0; d < 3; ++d) {
    if (pbc[d] || natoms == 0) continue;
    Kokkos::MinMaxScalar<double> mm;
    Kokkos::parallel_reduce(
        "mlip::nl::extent", Policy(0, natoms),
        KOKKOS_LAMBDA(int64_t i, Kokkos::MinMaxScalar<double> & v) {
          const double s = frac(i, d);
          if (s < v.min_val) v.min_val = s;
          if (s > v.max_val) v.max_val = s;
        },
        Kokkos::MinMax<double>(mm));
    extent.low[d] = mm.min_val;
    extent.high[d] = mm.max_val;
  }
  return extent;
}

/// Bins per cutoff length k: `requested` when positive, else the k in 1..4 of least estimated
/// cost. Bins at least cutoff/k thick make the stencil reach exactly k bins each way; k trades
/// candidate pairs, density * rc^3 * ((2k+1)/k)^3 per atom, against stencil entries, (2k+1)^3
/// per bin; the cost model weighs an entry as two candidates.
int choose_bins_per_cutoff(int requested, const FractionalExtent& extent, const std::array<double, 3>& height,
                           int64_t natoms, double cutoff) {
  double volume = 1.0;
  for (int d = 0; d < 3; ++d) volume *= std::max((extent.high[d] - extent.low[d]) * height[d], 1e-300);
  const double per_cutoff_cube = volume > 1e-200 ? double(natoms) / volume * cutoff * cutoff * cutoff : 0.0;
  int k_bins = requested;
  if (k_bins <= 0) {
    double best = std::numeric_limits<double>::infinity();
    for (int k = 1; k <= 4; ++k) {
      const double side = (2.0 * k + 1.0);
      const double atoms_per_bin = std::max(per_cutoff_cube / (k * k * k), 1e-3);
      const double cost = per_cutoff_cube * std::pow(side / k, 3) + 2.0 * std::pow(side, 3) / atoms_per_bin * 0.25 +
                          2.0 * std::pow(side, 3) * 0.75;
      if (cost < best) best = cost, k_bins = k;
    }
  }
  return k_bins;
}

/// The bins of the cell list: n[d] bins along cell direction d, each width[d] wide in
/// fractional coordinates, the first starting at origin[d].
struct BinGrid {
  int32_t n[3];
  double width[3];
  double origin[3];

  int32_t total() const { return n[0] * n[1] * n[2]; }
};

/// Bins cutoff/k_bins thick over the extent (height: the cell's face distances, Å), made
/// larger while there are more than 4 bins per atom (plus 64).
BinGrid choose_bin_grid(const FractionalExtent& extent, const std::array<double, 3>& height, std::array<bool, 3> pbc,
                        int64_t natoms, double cutoff, int k_bins) {
  // The margin keeps cutoff / thickness safely below k, so the stencil reach is exactly k.
  double bin_size = cutoff / k_bins * (1.0 + 1e-9);
  BinGrid grid;
  for (;;) {
    double total = 1.0;
    for (int d = 0; d < 3; ++d) {
      double span = extent.high[d] - extent.low[d];
      double thickness = span * height[d];
      grid.n[d] = int32_t(std::max(1.0, std::min(1e6, std::floor(thickness / bin_size))));
      if (!pbc[d] && span <= 0) grid.n[d] = 1;
      grid.width[d] = span > 0 ? span / grid.n[d] : 1.0;
      grid.origin[d] = extent.low[d];
      total *= grid.n[d];
    }
    if (total <= 4.0 * double(natoms) + 64.0) break;
    bin_size *= 1.25;  // sparse system: fewer, larger bins
  }
  return grid;
}

/// The stencil, flat [nstencil * 3]: every bin offset (a, b, c) whose two bins can hold atoms
/// closer than the cutoff. Throws mlip::Error when a direction needs over 10000 images.
std::vector<int32_t> stencil_offsets(const Mat3& h, const BinGrid& grid, const std::array<double, 3>& height,
                                     std::array<bool, 3> pbc, double cutoff) {
  int32_t reach[3];
  for (int d = 0; d < 3; ++d) {
    double thick = grid.width[d] * height[d];
    double r = std::ceil(cutoff / thick);
    if (!pbc[d]) r = std::min<double>(r, grid.n[d] - 1);
    if (r > 10000) {
      std::ostringstream msg;
      msg << "neighbour list: cell direction " << d << " is " << height[d]
          << " Å thick, too thin for cutoff " << cutoff << " Å (over 10000 images)";
      throw Error(msg.str());
    }
    reach[d] = int32_t(r);
  }
  std::vector<int32_t> stencil;
  for (int32_t a = -reach[0]; a <= reach[0]; ++a)
    for (int32_t b = -reach[1]; b <= reach[1]; ++b)
      for (int32_t c = -reach[2]; c <= reach[2]; ++c) {
        const int32_t o[3] = {a, b, c};
        std::array<double, 3> lo, hi;
        for (int d = 0; d < 3; ++d) {
          lo[d] = (o[d] - 1) * grid.width[d];
          hi[d] = (o[d] + 1) * grid.width[d];
        }
        if (min_box_distance(h, lo, hi) > cutoff * (1.0 + 1e-9)) continue;
        stencil.insert(stencil.end(), {a, b, c});
      }
  return stencil;
}

/// The stencil of stencil_offsets as a View [nstencil, 3] of the default memory space.
Kokkos::View<int32_t* [3]> upload_stencil(const std::vector<int32_t>& flat) {
  const int64_t nstencil = int64_t(flat.size() / 3);
  Kokkos::View<int32_t* [3]> stencil(Kokkos::view_alloc(Kokkos::WithoutInitializing, "stencil"), nstencil);
  auto on_host = Kokkos::create_mirror_view(stencil);
  for (int64_t e = 0; e < nstencil; ++e)
    for (int d = 0; d < 3; ++d) on_host(e, d) = flat[3 * e + d];
  Kokkos::deep_copy(stencil, on_host);
  return stencil;
}

/// Sorts the atoms into the bins of `grid` by counting sort: bin_of [natoms] receives each
/// atom's bin, bin_start [nbins + 1] where each bin's atoms start in sidx, and sidx [natoms] the
/// atom indices in bin order (fill_pos [nbins] is scratch). Placement within a bin follows atom
/// order on Serial; on parallel back-ends it may vary from run to run (the set of pairs does not).
void sort_into_bins(const Kokkos::View<double* [3]>& frac, const BinGrid& grid, const Kokkos::View<int32_t*>& bin_of,
                    const Kokkos::View<int64_t*>& bin_start, const Kokkos::View<int64_t*>& fill_pos,
                    const Kokkos::View<int32_t*>& sidx) {
  const int64_t natoms = int64_t(frac.extent(0));
  const int32_t nbins = grid.total();
  const double o0 = grid.origin[0], o1 = grid.origin[1], o2 = grid.origin[2];
  const double w0 = grid.width[0], w1 = grid.width[1], w2 = grid.width[2];
  const int32_t n0 = grid.n[0], n1 = grid.n[1], n2 = grid.n[2];
  Kokkos::parallel_for("mlip::nl::bin_of", Policy(0, natoms), KOKKOS_LAMBDA(int64_t i) {
    auto index = [](double s, double origin, double width, int32_t count) {
      const int32_t v = int32_t(Kokkos::Experimental::floor((s - origin) / width));
      return v < 0 ? 0 : (v >= count ? count - 1 : v);
    };
    bin_of(i) = (index(frac(i, 0), o0, w0, n0) * n1 + index(frac(i, 1), o1, w1, n1)) * n2 +
                index(frac(i, 2), o2, w2, n2);
  });
  Kokkos::deep_copy(bin_start, int64_t(0));
  Kokkos::parallel_for("mlip::nl::bin_count", Policy(0, natoms), KOKKOS_LAMBDA(int64_t i) {
    Kokkos::atomic_increment(&bin_start(bin_of(i) + 1));
  });
  Kokkos::parallel_scan("mlip::nl::bin_scan", Policy(0, nbins + 1),
                        KOKKOS_LAMBDA(int64_t b, int64_t & acc, bool final) {
                          acc += bin_start(b);
                          if (final) bin_start(b) = acc;
                        });
  Kokkos::deep_copy(fill_pos, int64_t(0));
  Kokkos::parallel_for("mlip::nl::bin_fill", Policy(0, natoms), KOKKOS_LAMBDA(int64_t i) {
    const int32_t b = bin_of(i);
    const int64_t slot = bin_start(b) + Kokkos::atomic_fetch_add(&fill_pos(b), int64_t(1));
    sidx(slot) = int32_t(i);
  });
}

/// Lays out the wrapped positions r + wrap * H (computed in double, stored in Real) in bin
/// order: spos [natoms, 3] Å and swrap [natoms, 3] (the wrap of each sorted atom), for the
/// atoms sidx [natoms] of pos [natoms, 3] Å.
template <typename Real, class PositionView>
void sorted_wrapped_positions(const PositionView& pos, const Kokkos::View<int32_t* [3]>& wrap, const Mat3& h,
                              const Kokkos::View<int32_t*>& sidx, const Kokkos::View<Real* [3]>& spos,
                              const Kokkos::View<int32_t* [3]>& swrap) {
  const int64_t natoms = int64_t(sidx.extent(0));
  Matrix h_k;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) h_k.m[a][b] = h[a][b];
  Kokkos::parallel_for("mlip::nl::sorted_positions", Policy(0, natoms), KOKKOS_LAMBDA(int64_t k) {
    const int32_t i = sidx(k);
    for (int c = 0; c < 3; ++c) {
      double v = double(pos(i, c));
      for (int d = 0; d < 3; ++d) v += wrap(i, d) * h_k.m[d][c];
      spos(k, c) = Real(v);
      swrap(k, c) = wrap(i, c);
    }
  });
}

/// The pair search over the sorted positions spos [natoms, 3] Å, the bins (bin_start
/// [nbins + 1]) and the stencil [nstencil, 3] of the frame h, for the given cutoff, Å.
template <typename Real>
PairSearch<Real> make_pair_search(const Kokkos::View<Real* [3]>& spos, const Kokkos::View<int64_t*>& bin_start,
                                  const Kokkos::View<int32_t* [3]>& stencil, const Mat3& h, const BinGrid& grid,
                                  std::array<bool, 3> pbc, double cutoff) {
  PairSearch<Real> search;
  search.spos = spos;
  search.bin_start = bin_start;
  search.stencil = stencil;
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) search.h[a][b] = Real(h[a][b]);
    search.n[a] = grid.n[a];
    search.periodic[a] = pbc[a];
  }
  search.rc2 = Real(cutoff) * Real(cutoff);
  return search;
}

/// Pass 1: counts the neighbours of each atom (0 for atoms >= centres) and turns the counts into
/// offsets [natoms + 1] (exclusive prefix sum; offsets(natoms) = number of pairs, returned).
/// One team per bin; its atoms share the bin's table of neighbour bins.
template <typename Real>
int64_t count_pairs(const PairSearch<Real>& search, int32_t nbins, const Kokkos::View<int32_t*>& sidx,
                    int64_t centres, const Kokkos::View<int64_t*>& offsets) {
  const int64_t natoms = int64_t(sidx.extent(0));
  const int64_t nstencil = int64_t(search.stencil.extent(0));
  const auto bin_start = search.bin_start;
  const auto teams = TeamPolicy(nbins, Kokkos::AUTO)
                         .set_scratch_size(0, Kokkos::PerTeam(BinTable<Real>::scratch_bytes(nstencil)));
  Kokkos::parallel_for("mlip::nl::count", teams, KOKKOS_LAMBDA(const Member& team) {
    const int64_t k0 = bin_start(team.league_rank()), k1 = bin_start(team.league_rank() + 1);
    if (k0 == k1) return;
    const BinTable<Real> table = search.table(team);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k0, k1), [&](int64_t k) {
      offsets(sidx(k)) = sidx(k) < centres ? search.count(table, k) : 0;
    });
  });
  int64_t npairs = 0;
  Kokkos::parallel_scan("mlip::nl::offsets", Policy(0, natoms),
                        KOKKOS_LAMBDA(int64_t i, int64_t & acc, bool final) {
                          const int64_t c = offsets(i);
                          if (final) offsets(i) = acc;
                          acc += c;
                        },
                        npairs);
  Kokkos::deep_copy(Kokkos::subview(offsets, natoms), npairs);
  return npairs;
}

/// Pass 2: writes the pairs of every centre (atoms < centres) at its offsets [natoms + 1] into
/// the neighbor, shift, vector and distance Views of `out` (sized offsets(natoms)), through a
/// per-thread buffer of max_count + 1 rows (branch-free gather). Throws mlip::Error when the
/// pass finds other counts than count_pairs.
template <typename Real>
void fill_pairs(const PairSearch<Real>& search, int32_t nbins, const Kokkos::View<int32_t*>& sidx,
                const Kokkos::View<int32_t* [3]>& swrap, int64_t centres, const Kokkos::View<int64_t*>& offsets,
                const NeighborList<Real>& out) {
  const int64_t natoms = int64_t(sidx.extent(0));
  const int64_t nstencil = int64_t(search.stencil.extent(0));
  const auto bin_start = search.bin_start;
  auto neighbor = out.neighbor;
  auto shift = out.shift;
  auto vec = out.vector;
  auto dist = out.distance;
  int64_t max_count = 0;
  Kokkos::parallel_reduce("mlip::nl::max_count", Policy(0, natoms),
                          KOKKOS_LAMBDA(int64_t i, int64_t & m) {
                            const int64_t c = offsets(i + 1) - offsets(i);
                            if (c > m) m = c;
                          },
                          Kokkos::Max<int64_t>(max_count));
  using IntBuf = Kokkos::View<int32_t* [4], Kokkos::LayoutRight, Scratch, Unmanaged>;
  using RealBuf = Kokkos::View<Real* [4], Kokkos::LayoutRight, Scratch, Unmanaged>;
  const int64_t cap = max_count + 1;
  const auto fill_teams =
      TeamPolicy(nbins, Kokkos::AUTO)
          .set_scratch_size(0, Kokkos::PerTeam(BinTable<Real>::scratch_bytes(nstencil)),
                            Kokkos::PerThread(IntBuf::shmem_size(cap) + RealBuf::shmem_size(cap)));
  Kokkos::View<int64_t> mismatch("mismatch");
  Kokkos::parallel_for("mlip::nl::fill", fill_teams, KOKKOS_LAMBDA(const Member& team) {
    const int64_t k0 = bin_start(team.league_rank()), k1 = bin_start(team.league_rank() + 1);
    if (k0 == k1) return;
    const BinTable<Real> table = search.table(team);
    const IntBuf ibuf(team.thread_scratch(0), cap);
    const RealBuf rbuf(team.thread_scratch(0), cap);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k0, k1), [&](int64_t k) {
      if (sidx(k) >= centres) return;
      const int64_t p0 = offsets(sidx(k));
      const int64_t expected = offsets(sidx(k) + 1) - p0;
      int64_t found = search.gather(table, k, ibuf, rbuf, cap - 1);
      if (found != expected) {
        Kokkos::atomic_increment(&mismatch());
        found = found < expected ? found : expected;
      }
      const int32_t wk0 = swrap(k, 0), wk1 = swrap(k, 1), wk2 = swrap(k, 2);
      for (int64_t q = 0; q < found; ++q) {
        const int32_t m = ibuf(q, 0);
        const int64_t p = p0 + q;
        neighbor(p) = sidx(m);
        shift(p, 0) = int16_t(ibuf(q, 1) + swrap(m, 0) - wk0);
        shift(p, 1) = int16_t(ibuf(q, 2) + swrap(m, 1) - wk1);
        shift(p, 2) = int16_t(ibuf(q, 3) + swrap(m, 2) - wk2);
        vec(p, 0) = rbuf(q, 0);
        vec(p, 1) = rbuf(q, 1);
        vec(p, 2) = rbuf(q, 2);
        dist(p) = Kokkos::Experimental::sqrt(rbuf(q, 3));
      }
    });
  });
  Kokkos::fence();
  int64_t mismatches = 0;
  Kokkos::deep_copy(mismatches, mismatch);
  if (mismatches != 0) {
    std::ostringstream msg;
    msg << "neighbour list: internal error: the counting and filling passes disagree for "
        << mismatches << " atoms (floating-point contraction differs between them?)";
    throw Error(msg.str());
  }
}
}  // namespace

template <typename Real>
NeighborListBuilder<Real>::NeighborListBuilder(const NeighborListOptions& options) : options_(options) {}

template <typename Real>
NeighborList<Real> build_neighbor_list(const Real* positions, int64_t natoms, const double* cell,
                                       std::array<bool, 3> pbc, double cutoff,
                                       const NeighborListOptions& options) {
  NeighborListBuilder<Real> builder(options);
  return builder.build(positions, natoms, cell, pbc, cutoff);
}

template <typename Real>
NeighborList<Real> NeighborListBuilder<Real>::build(const Real* positions, int64_t natoms,
                                                    const double* cell, std::array<bool, 3> pbc,
                                                    double cutoff, int64_t centres) {
  if (centres < 0) centres = natoms;
  ensure_kokkos_initialized();
  check_build_arguments(natoms, centres, cutoff);
  NeighborList<Real> out;
  out.natoms = centres;
  out.cutoff = cutoff;

  const Mat3 h = working_frame(cell, pbc);
  const std::array<double, 3> height = face_distances(h);
  // The input, seen as a View (no copy on a host back-end).
  const HostPositions<Real> pos_host(positions, natoms);
  auto pos = Kokkos::create_mirror_view_and_copy(typename ExecSpace::memory_space(), pos_host);

  auto frac = rows(frac_, natoms, "frac");
  auto wrap = rows(wrap_, natoms, "wrap");
  wrap_into_cell(pos, positions, inverse3(h), pbc, frac, wrap);
  const FractionalExtent extent = fractional_extent(frac, pbc);
  const int k_bins = choose_bins_per_cutoff(options_.bins_per_cutoff, extent, height, natoms, cutoff);
  const BinGrid grid = choose_bin_grid(extent, height, pbc, natoms, cutoff, k_bins);
  const int32_t nbins = grid.total();
  const std::vector<int32_t> stencil_host = stencil_offsets(h, grid, height, pbc, cutoff);

  auto bin_of = rows(bin_of_, natoms, "bin_of");
  auto bin_start = rows(bin_start_, nbins + 1, "bin_start");
  auto fill_pos = rows(fill_pos_, nbins, "fill_pos");
  auto sidx = rows(sidx_, natoms, "sidx");
  sort_into_bins(frac, grid, bin_of, bin_start, fill_pos, sidx);
  auto spos = rows(spos_, natoms, "spos");
  auto swrap = rows(swrap_, natoms, "swrap");
  sorted_wrapped_positions(pos, wrap, h, sidx, spos, swrap);
  // The fractional coordinates, wraps and bin ids are no longer needed: release them (40 bytes
  // per atom) before the output is allocated, to keep the peak memory low. (Fence first: kernels
  // on an asynchronous back-end may still be reading them.)
  Kokkos::fence();
  frac = decltype(frac)();
  wrap = decltype(wrap)();
  bin_of = decltype(bin_of)();
  frac_ = decltype(frac_)();
  wrap_ = decltype(wrap_)();
  bin_of_ = decltype(bin_of_)();

  const PairSearch<Real> search =
      make_pair_search(spos, bin_start, upload_stencil(stencil_host), h, grid, pbc, cutoff);
  auto offsets = rows(offsets_, natoms + 1, "offsets");
  const int64_t npairs = count_pairs(search, nbins, sidx, centres, offsets);

  out.offsets = offsets;
  if (centres < natoms) out.offsets = Kokkos::subview(offsets, std::make_pair(int64_t(0), centres + 1));
  out.neighbor = rows(neighbor_, npairs, "neighbor");
  out.shift = rows(shift_, npairs, "shift");
  out.vector = rows(vector_, npairs, "vector");
  out.distance = rows(distance_, npairs, "distance");
  fill_pairs(search, nbins, sidx, swrap, centres, offsets, out);
  return out;
}

template class NeighborListBuilder<float>;
template class NeighborListBuilder<double>;
template NeighborList<float> build_neighbor_list<float>(const float*, int64_t, const double*,
                                                        std::array<bool, 3>, double,
                                                        const NeighborListOptions&);
template NeighborList<double> build_neighbor_list<double>(const double*, int64_t, const double*,
                                                          std::array<bool, 3>, double,
                                                          const NeighborListOptions&);

}  // namespace mlip::data
