#include "data/neighbor_stat.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "data/neighbor_list.h"
#include "error.h"

namespace mlip::data {

std::vector<int64_t> evenly_spaced_frames(int64_t nframes, int64_t take) {
  std::vector<int64_t> out;
  if (take >= nframes || take < 0) {
    for (int64_t f = 0; f < nframes; ++f) out.push_back(f);
    return out;
  }
  if (take <= 1) return {0};
  for (int64_t k = 0; k < take; ++k) {
    const int64_t f = k * (nframes - 1) / (take - 1);
    if (out.empty() || f != out.back()) out.push_back(f);
  }
  return out;
}

NeighborStat neighbor_stat(const std::vector<System>& systems, int ntypes, double rcut, int64_t max_frames) {
  const int64_t per_system =
      max_frames < 0 ? -1 : std::max<int64_t>(1, max_frames / std::max<int64_t>(1, int64_t(systems.size())));
  NeighborStat stat;
  stat.min_distance = std::numeric_limits<double>::infinity();
  stat.max_neighbors.assign(size_t(std::max(ntypes, 0)), 0);
  std::vector<int64_t> count(size_t(std::max(ntypes, 0)));
  for (const System& sys : systems) {
    const int64_t n = sys.natoms();
    for (int t : sys.types)
      if (t < 0 || t >= ntypes) {
        std::ostringstream msg;
        msg << sys.name << ": atom type " << t << " outside the type map of " << ntypes << " types";
        throw Error(msg.str());
      }
    for (int64_t f : evenly_spaced_frames(sys.nframes, per_system)) {
      const Frame frame = sys.frame(f);
      auto nl = build_neighbor_list<double>(frame.coord.data(), n, frame.cell(), sys.pbc, rcut);
      auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
      auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
      auto dist = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.distance);
      for (int64_t i = 0; i < n; ++i) {
        std::fill(count.begin(), count.end(), 0);
        for (int64_t p = offsets(i); p < offsets(i + 1); ++p) {
          const int32_t j = neighbor(p);
          ++count[size_t(sys.types[size_t(j)])];
          if (dist(p) < stat.min_distance) {
            stat.min_distance = dist(p);
            std::ostringstream where;
            where << sys.name << " frame " << f << " atoms " << i << "-" << j;
            stat.min_where = where.str();
          }
        }
        for (int t = 0; t < ntypes; ++t)
          stat.max_neighbors[size_t(t)] = std::max(stat.max_neighbors[size_t(t)], count[size_t(t)]);
      }
      if (stat.min_distance < kOverlapDistance) {
        std::ostringstream msg;
        msg << "overlapping atoms: " << stat.min_where << " are " << stat.min_distance
            << " Å apart (expected at least " << kOverlapDistance << " Å)";
        throw Error(msg.str());
      }
      ++stat.frames;
    }
  }
  return stat;
}

}  // namespace mlip::data
