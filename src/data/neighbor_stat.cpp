#include "data/neighbor_stat.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <new>
#include <sstream>

#include "data/neighbor_list.h"
#include "byte_size.h"
#include "error.h"

namespace mlip::data {
namespace {

using Vec3 = std::array<double, 3>;

Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }

/// Whether an exception is an allocation failure: std::bad_alloc, or Kokkos' runtime error that
/// wraps one ("Kokkos failed to allocate memory ...").
bool is_allocation_failure(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  const std::string what = e.what();
  return what.find("Kokkos") != std::string::npos && what.find("allocat") != std::string::npos;
}

}  // namespace

double estimate_neighbor_pairs(const double* positions, int64_t natoms, const double* cell,
                               std::array<bool, 3> pbc, double rcut) {
  if (natoms <= 1) return 0.0;
  // The three directions: the cell's when it has a non-singular one, else x, y, z.
  std::array<Vec3, 3> a{};
  bool use_cell = cell != nullptr;
  if (use_cell) {
    for (int d = 0; d < 3; ++d) a[size_t(d)] = {cell[3 * d], cell[3 * d + 1], cell[3 * d + 2]};
    use_cell = std::abs(dot(a[0], cross(a[1], a[2]))) > 1e-12;
  }
  if (!use_cell) {
    if (pbc[0] || pbc[1] || pbc[2]) return 0.0;
    a = {Vec3{1, 0, 0}, Vec3{0, 1, 0}, Vec3{0, 0, 1}};
  }
  const double volume = std::abs(dot(a[0], cross(a[1], a[2])));
  const double reach = std::cbrt(4.0 * M_PI / 3.0) * rcut;  // the side of a cube as large as the sphere
  double fraction = 1.0;
  for (int d = 0; d < 3; ++d) {
    const Vec3 normal = cross(a[size_t((d + 1) % 3)], a[size_t((d + 2) % 3)]);
    if (pbc[size_t(d)]) {
      fraction *= reach / (volume / norm(normal));  // thickness of the cell across this direction
    } else {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      const Vec3 unit = {normal[0] / norm(normal), normal[1] / norm(normal), normal[2] / norm(normal)};
      for (int64_t i = 0; i < natoms; ++i) {
        const double x = dot(unit, Vec3{positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]});
        lo = std::min(lo, x), hi = std::max(hi, x);
      }
      fraction *= std::min(1.0, reach / std::max(hi - lo, 1e-300));
    }
  }
  return double(natoms) * double(natoms) * fraction;
}

double available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0.0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

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

NeighborStat neighbor_stat(const std::vector<System>& systems, int ntypes, double rcut, int64_t max_frames,
                           const std::string& rcut_name) {
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
      // Refused before allocating: a radius far beyond the data's (a typo, 6000 for 6) would
      // otherwise take all the memory first.
      const double pairs = estimate_neighbor_pairs(frame.coord.data(), n, frame.cell(), sys.pbc, rcut);
      const double needed = pairs * kNeighborPairBytes + double(n) * 8.0;
      const double available = available_memory_bytes();
      auto radius_text = [&] {
        std::ostringstream text;
        text << rcut_name << " " << rcut << ": ";
        return text.str();
      };
      if (available > 0.0 && needed > available) {
        std::ostringstream msg;
        std::ostringstream pair_count;
        pair_count << std::scientific << std::setprecision(2) << pairs;
        msg << radius_text() << "the neighbour list of " << sys.name << " frame " << f << " (" << n << " atoms, about "
            << pair_count.str() << " pairs within " << rcut << " Å) would need about " << bytes_in_words(needed) << " of memory; " << bytes_in_words(available)
            << " are available. Is the radius right (in Å)?";
        throw Error(msg.str());
      }
      NeighborList<double> nl;
      try {
        nl = build_neighbor_list<double>(frame.coord.data(), n, frame.cell(), sys.pbc, rcut);
      } catch (const Error& e) {
        throw Error(radius_text() + sys.name + " frame " + std::to_string(f) + ": " + e.what());
      } catch (const std::exception& e) {
        if (!is_allocation_failure(e)) throw;
        throw Error(radius_text() + "out of memory while building the neighbour list of " + sys.name + " frame " +
                    std::to_string(f) + " (" + std::to_string(n) + " atoms; estimated " + bytes_in_words(needed) +
                    "); is the radius right (in Å)?");
      }
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
