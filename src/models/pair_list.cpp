#include "models/pair_list.h"

#include <type_traits>

namespace mlip::models {

template <typename Real>
PairList pair_list(const data::NeighborList<Real>& nl) {
  // One copy of each View to host memory (a no-op view where the list already lives there).
  const auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  const auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  const auto shift = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.shift);
  const auto vector = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.vector);
  const int64_t n = nl.natoms, np = nl.npairs();
  constexpr auto real = std::is_same_v<Real, float> ? torch::kFloat32 : torch::kFloat64;
  PairList out;
  out.centre = torch::empty({np}, torch::kInt64);
  out.neighbor = torch::empty({np}, torch::kInt64);
  out.shift = torch::empty({np, 3}, torch::kFloat64);
  out.vector = torch::empty({np, 3}, real);
  int64_t* ci = out.centre.data_ptr<int64_t>();
  int64_t* nj = out.neighbor.data_ptr<int64_t>();
  double* s = out.shift.data_ptr<double>();
  Real* d = out.vector.data_ptr<Real>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = offsets(i); p < offsets(i + 1); ++p) {
      ci[p] = i;
      nj[p] = neighbor(p);
      for (int k = 0; k < 3; ++k) {
        s[3 * p + k] = double(shift(p, k));
        d[3 * p + k] = vector(p, k);
      }
    }
  return out;
}

template PairList pair_list<float>(const data::NeighborList<float>&);
template PairList pair_list<double>(const data::NeighborList<double>&);

}  // namespace mlip::models
