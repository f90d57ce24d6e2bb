// Neighbour-list benchmark: diamond and water-density supercells, 10^3..10^6 atoms, cutoffs 3
// and 6 Å. Prints atoms, pairs, median build time, pairs/s and the peak memory of the build.
// Usage: bench_neighbor_list [--max-atoms N] [--float] [--repeats K] [--bins-per-cutoff K]
//                            [--only diamond|water]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"

namespace {

struct Structure {
  std::string name;
  std::vector<double> pos;
  std::vector<double> cell;
};

Structure diamond(int n) {
  const double a = 3.567;
  const double basis[8][3] = {{0, 0, 0},       {0, .5, .5},     {.5, 0, .5},     {.5, .5, 0},
                              {.25, .25, .25}, {.25, .75, .75}, {.75, .25, .75}, {.75, .75, .25}};
  Structure s{"diamond", {}, {n * a, 0, 0, 0, n * a, 0, 0, 0, n * a}};
  s.pos.reserve(size_t(8) * n * n * n * 3);
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y)
      for (int z = 0; z < n; ++z)
        for (auto& b : basis) {
          s.pos.push_back((x + b[0]) * a);
          s.pos.push_back((y + b[1]) * a);
          s.pos.push_back((z + b[2]) * a);
        }
  return s;
}

/// Water at 1 g/cm^3: one molecule per cube of 3.1035 Å, O at the corner, H at 0.9572 Å
/// with the 104.52° angle, orientations random (seeded).
Structure water(int n) {
  const double spacing = std::cbrt(18.01528 / 0.602214076);  // Å per molecule at 1 g/cm^3
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0.0, 1.0);
  Structure s{"water", {}, {n * spacing, 0, 0, 0, n * spacing, 0, 0, 0, n * spacing}};
  const double roh = 0.9572, half = 104.52 / 2 * M_PI / 180;
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y)
      for (int z = 0; z < n; ++z) {
        double o[3] = {x * spacing, y * spacing, z * spacing};
        // Random orthonormal frame (u, v).
        double u[3] = {g(rng), g(rng), g(rng)}, v[3] = {g(rng), g(rng), g(rng)};
        double nu = std::sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
        for (double& c : u) c /= nu;
        double p = u[0] * v[0] + u[1] * v[1] + u[2] * v[2];
        for (int k = 0; k < 3; ++k) v[k] -= p * u[k];
        double nv = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        for (double& c : v) c /= nv;
        s.pos.insert(s.pos.end(), o, o + 3);
        for (int sign : {1, -1})
          for (int k = 0; k < 3; ++k)
            s.pos.push_back(o[k] + roh * (std::cos(half) * u[k] + sign * std::sin(half) * v[k]));
      }
  return s;
}

long read_status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + std::string(key).size());
  return -1;
}

/// Resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
void reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

mlip::data::NeighborListOptions g_options;

/// Times fresh builds (every build allocates its output, as a one-off call does) and reused
/// builds (one NeighborListBuilder, as an MD loop or a trainer does; after one warm-up build).
template <typename Real>
void run(const Structure& s, double cutoff, int repeats) {
  const int64_t n = int64_t(s.pos.size() / 3);
  std::vector<Real> pos(s.pos.begin(), s.pos.end());
  auto median = [](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  auto seconds = [](auto t0) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::vector<double> fresh, reused;
  long peak_kb = 0;
  int64_t pairs = 0;
  for (int r = 0; r < repeats; ++r) {
    reset_peak();
    const long base_kb = read_status_kb("VmRSS:");
    auto t0 = std::chrono::steady_clock::now();
    auto nl = mlip::data::build_neighbor_list<Real>(pos.data(), n, s.cell.data(), {{true, true, true}}, cutoff, g_options);
    fresh.push_back(seconds(t0));
    peak_kb = std::max(peak_kb, read_status_kb("VmHWM:") - base_kb);
    pairs = nl.npairs();
  }
  {
    mlip::data::NeighborListBuilder<Real> builder(g_options);
    builder.build(pos.data(), n, s.cell.data(), {{true, true, true}}, cutoff);
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      builder.build(pos.data(), n, s.cell.data(), {{true, true, true}}, cutoff);
      reused.push_back(seconds(t0));
    }
  }
  const double f = median(fresh), u = median(reused);
  std::printf("%-8s %9ld  %4.1f  %11ld  %10.3f  %9.3g  %10.3f  %9.3g  %8.1f  %6.1f\n", s.name.c_str(), long(n), cutoff,
              long(pairs), f * 1e3, pairs / f, u * 1e3, pairs / u, peak_kb / 1024.0,
              pairs ? peak_kb * 1024.0 / double(pairs) : 0.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_atoms = 1000000;
  bool use_float = false;
  int repeats_override = 0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--max-atoms" && i + 1 < argc) max_atoms = std::atoll(argv[++i]);
    else if (a == "--float") use_float = true;
    else if (a == "--repeats" && i + 1 < argc) repeats_override = std::atoi(argv[++i]);
    else if (a == "--bins-per-cutoff" && i + 1 < argc) g_options.bins_per_cutoff = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_neighbor_list [--max-atoms N] [--float] [--repeats K] [--bins-per-cutoff K] [--only diamond|water]\n");
      return 2;
    }
  }
  mlip::data::ensure_kokkos_initialized();
  std::printf("# mlip neighbour list, Kokkos %s, %s, full list with shifts, vectors, distances\n",
              mlip::data::kokkos_execution_space_name(), use_float ? "float32" : "float64");
  std::printf("# fresh: each build allocates its output; reused: one NeighborListBuilder (MD loop)\n");
  std::printf("# peak_MB: peak RSS growth during a fresh build (small sizes reuse freed heap: ~0)\n");
  std::printf("# %-6s %9s  %4s  %11s  %10s  %9s  %10s  %9s  %8s  %6s\n", "struct", "atoms", "rc", "pairs", "fresh_ms",
              "pairs/s", "reused_ms", "pairs/s", "peak_MB", "B/pair");
  const int diamond_n[] = {5, 11, 15, 23, 50};  // 1,000 .. 1,000,000 atoms
  const int water_n[] = {7, 15, 21, 32, 69};    // 1,029 .. 985,527 atoms
  for (double rc : {3.0, 6.0})
    for (int k = 0; k < 5; ++k)
      for (int w = 0; w < 2; ++w) {
        Structure s = w == 0 ? diamond(diamond_n[k]) : water(water_n[k]);
        const int64_t n = int64_t(s.pos.size() / 3);
        if (n > max_atoms || (!only.empty() && s.name != only)) continue;
        const int repeats = repeats_override ? repeats_override : (n <= 2000 ? 21 : n <= 120000 ? 7 : 3);
        if (use_float) run<float>(s, rc, repeats);
        else run<double>(s, rc, repeats);
      }
  return 0;
}
