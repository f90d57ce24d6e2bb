#include "data/overlap.h"

#include <algorithm>
#include <limits>
#include <mutex>

#include "data/kokkos_runtime.h"

namespace mlip::data {

template <typename Real>
std::optional<Overlap> find_overlap(const NeighborList<Real>& list, double threshold) {
  const int64_t npairs = list.npairs();
  if (npairs == 0) return std::nullopt;
  // The pair with the smallest distance, found where the list lives; only that pair is copied.
  using Reducer = Kokkos::MinLoc<double, int64_t>;
  typename Reducer::value_type closest;
  const auto distance = list.distance;
  Kokkos::parallel_reduce(
      "mlip::find_overlap", Kokkos::RangePolicy<>(0, npairs),
      KOKKOS_LAMBDA(int64_t p, typename Reducer::value_type & best) {
        const double d = double(distance(p));
        if (d < best.val) {
          best.val = d;
          best.loc = p;
        }
      },
      Reducer(closest));
  if (!(closest.val < threshold)) return std::nullopt;
  const int64_t p = closest.loc;
  Overlap o;
  o.distance = closest.val;
  o.j = int64_t(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(list.neighbor, p))());
  for (int d = 0; d < 3; ++d)
    o.shift[size_t(d)] =
        int(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(list.shift, p, d))());
  // The centre owning pair p: offsets(i) <= p < offsets(i + 1).
  const auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list.offsets);
  const int64_t* begin = offsets.data();
  o.i = int64_t(std::upper_bound(begin, begin + list.natoms + 1, p) - begin) - 1;
  return o;
}

template std::optional<Overlap> find_overlap<float>(const NeighborList<float>&, double);
template std::optional<Overlap> find_overlap<double>(const NeighborList<double>&, double);

std::optional<Overlap> find_overlap(const double* positions, int64_t natoms, const double* cell,
                                    std::array<bool, 3> pbc) {
  if (natoms < 2 && cell == nullptr) return std::nullopt;
  // Frames are read and checked on the trainer's worker threads, beside models building their
  // lists: one Kokkos user at a time (data/kokkos_runtime.h).
  std::lock_guard<std::mutex> lock(kokkos_mutex());
  const NeighborList<double> list = build_neighbor_list<double>(positions, natoms, cell, pbc, kOverlapDistance);
  std::optional<Overlap> o = find_overlap(list, kOverlapDistance);
  if (o && o->i > o->j) {  // the list holds both i->j and j->i: name the lower index first
    std::swap(o->i, o->j);
    for (int& s : o->shift) s = -s;
  }
  return o;
}

}  // namespace mlip::data
