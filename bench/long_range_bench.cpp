// The long-range sum's cost on the host (docs/long_range.md "On a mesh"): the k-vector sum
// (ReciprocalSum) against the mesh (MeshSum) for water-density boxes of N charges, one core,
// float64. Prints, per size, the k-vectors, the grid, milliseconds per evaluation (energy,
// potentials, forces and virial) and the mesh's largest force error against the k-vector sum.
//
// usage: bench_long_range [N ...]     (default 768 3072 12288)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "models/long_range/ewald.h"
#include "models/long_range/mesh_ewald.h"

using namespace mlip::models;

namespace {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes;
  for (int a = 1; a < argc; ++a) sizes.push_back(std::atol(argv[a]));
  if (sizes.empty()) sizes = {768, 3072, 12288};
  LongRangeSettings settings;
  settings.enabled = true;  // the defaults: sigma 1 Å, spacing 2 Å
  std::printf("%8s %10s %14s %14s %16s %14s %16s\n", "atoms", "box (Å)", "k-vectors", "k-sum (ms)", "grid", "mesh (ms)",
              "force error");
  for (long n : sizes) {
    const double length = std::cbrt(double(n) / 0.1003);  // water: 0.1003 atoms / Å³
    const double cell[9] = {length, 0, 0, 0, length, 0, 0, 0, length};
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> pos(static_cast<size_t>(3 * n), 0.0), q(static_cast<size_t>(n), 0.0);
    double sum = 0, square = 0;
    for (long i = 0; i < n; ++i) {
      for (int a = 0; a < 3; ++a) pos[size_t(3 * i + a)] = u(rng) * length;
      q[size_t(i)] = (i % 3 == 0 ? -0.8 : 0.4) + 0.05 * (u(rng) - 0.5);
      sum += q[size_t(i)];
    }
    for (double& x : q) x -= sum / double(n), square += x * x;
    std::vector<double> f_exact(static_cast<size_t>(3 * n), 0.0), f_mesh(static_cast<size_t>(3 * n), 0.0), phi(static_cast<size_t>(n), 0.0);
    double virial[9];
    auto start = std::chrono::steady_clock::now();
    const ReciprocalSum exact(settings, cell);
    std::vector<double> s;
    exact.add_structure_factor(n, pos.data(), q.data(), s);
    exact.energy(s, 0.0, square);
    exact.potentials_and_forces(s, 0.0, n, pos.data(), q.data(), phi.data(), f_exact.data());
    exact.virial(s, 0.0, virial);
    const double exact_ms = milliseconds_since(start);
    double mesh_ms = 1e30;
    long long grid[3] = {0, 0, 0};
    for (int repeat = 0; repeat < 3; ++repeat) {
      start = std::chrono::steady_clock::now();
      const MeshSum mesh(settings, cell);
      std::vector<double> charges, potential;
      mesh.spread(n, pos.data(), q.data(), charges);
      mesh.solve(charges, 0.0, square, potential, virial);
      mesh.potentials_and_forces(potential, 0.0, n, pos.data(), q.data(), phi.data(), f_mesh.data());
      mesh_ms = std::min(mesh_ms, milliseconds_since(start));
      for (int a = 0; a < 3; ++a) grid[a] = (long long)mesh.grid()[size_t(a)];
    }
    double error = 0;
    for (long i = 0; i < 3 * n; ++i) error = std::max(error, std::abs(f_mesh[size_t(i)] - f_exact[size_t(i)]));
    char grid_text[64];
    std::snprintf(grid_text, sizeof(grid_text), "%lldx%lldx%lld", grid[0], grid[1], grid[2]);
    std::printf("%8ld %10.1f %14lld %14.1f %16s %14.1f %13.1e eV/Å\n", n, length, (long long)exact.size(), exact_ms,
                grid_text, mesh_ms, error);
  }
  return 0;
}
