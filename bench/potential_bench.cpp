// MD speed of md::Potential without LAMMPS (bench/README.md "MD on a GPU"): what
// `pair_style mlip model.pt device D` computes per step on one rank, timed on the water example's
// box replicated nx x ny x nz. The owned atoms are the replicated box; the ghosts are its periodic
// images within the potential's ghost cutoff plus a 1 Å skin (what LAMMPS gives one rank), with
// their ids, so that ghosts imaging owned atoms are folded onto them as pair_style mlip does.
//
// usage: bench_potential MODEL.pt DEVICE DATA_DIR NX NY NZ STEPS [auto|torchscript] [WARMUP]
//   DATA_DIR: a DeePMD system (types O and H) with an orthorhombic cell; frame 0 is used.
//   WARMUP: untimed steps first (default 3: TorchScript's profiling executor optimises the
//   forward during its first calls).
// Prints one line: key=value pairs (atoms, ghosts, model_atoms, steps, seconds, us_per_atom_step
// (from the total), median_ms and max_ms (per step), neighbor_list_share, energy_per_atom,
// describe).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "compat/blas_kernels.h"
#include "data/deepmd_system.h"
#include "error.h"
#include "md/potential.h"

namespace {

struct Box {
  std::vector<double> pos;  // [natoms * 3] Å
  std::vector<int> types;
  std::vector<int64_t> ids;
  int64_t nlocal = 0;
  std::array<double, 3> length{};
};

Box replicated_water(const std::string& dir, const std::vector<std::string>& type_names, int nx, int ny, int nz) {
  const mlip::data::System sys = mlip::data::read_deepmd_system(dir, type_names);
  if (sys.box.size() < 9) throw mlip::Error(dir + ": expected a periodic system with box.npy, found none");
  const double* cell = sys.box.data();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      if (r != c && std::abs(cell[r * 3 + c]) > 1e-12)
        throw mlip::Error(dir + ": expected an orthorhombic cell, got a non-zero off-diagonal element");
  const int64_t n = int64_t(sys.types.size());
  const std::array<int, 3> reps{nx, ny, nz};
  Box b;
  for (int d = 0; d < 3; ++d) b.length[size_t(d)] = cell[d * 4] * reps[size_t(d)];
  for (int a = 0; a < nx; ++a)
    for (int bb = 0; bb < ny; ++bb)
      for (int c = 0; c < nz; ++c)
        for (int64_t i = 0; i < n; ++i) {
          const std::array<int, 3> shift{a, bb, c};
          for (int d = 0; d < 3; ++d) {
            const double l = cell[d * 4];
            double x = sys.coord[size_t(i * 3 + d)];
            x -= std::floor(x / l) * l;
            b.pos.push_back(x + shift[size_t(d)] * l);
          }
          b.types.push_back(sys.types[size_t(i)]);
          b.ids.push_back(int64_t(b.ids.size()));
        }
  b.nlocal = int64_t(b.types.size());
  return b;
}

/// Appends the periodic images of the owned atoms that lie within `reach` of the box.
void add_ghosts(Box& b, double reach) {
  std::array<int, 3> k{};
  for (int d = 0; d < 3; ++d) k[size_t(d)] = int(std::ceil(reach / b.length[size_t(d)]));
  for (int a = -k[0]; a <= k[0]; ++a)
    for (int bb = -k[1]; bb <= k[1]; ++bb)
      for (int c = -k[2]; c <= k[2]; ++c) {
        if (!a && !bb && !c) continue;
        const std::array<int, 3> shift{a, bb, c};
        for (int64_t i = 0; i < b.nlocal; ++i) {
          std::array<double, 3> x{};
          bool inside = true;
          for (int d = 0; d < 3; ++d) {
            x[size_t(d)] = b.pos[size_t(i * 3 + d)] + shift[size_t(d)] * b.length[size_t(d)];
            inside = inside && x[size_t(d)] >= -reach && x[size_t(d)] < b.length[size_t(d)] + reach;
          }
          if (!inside) continue;
          b.pos.insert(b.pos.end(), x.begin(), x.end());
          b.types.push_back(b.types[size_t(i)]);
          b.ids.push_back(b.ids[size_t(i)]);
        }
      }
}

int run(int argc, char** argv) {
  if (argc < 8 || argc > 11) {
    std::fprintf(stderr, "usage: %s MODEL.pt DEVICE DATA_DIR NX NY NZ STEPS [auto|torchscript] [WARMUP] [auto|host|device]\n",
                 argv[0]);
    return 2;
  }
  const std::string evaluation_name = argc >= 9 ? argv[8] : "auto";
  const int warmup = argc >= 10 ? std::atoi(argv[9]) : 3;
  const std::string pairs_name = argc >= 11 ? argv[10] : "auto";
  if (pairs_name != "auto" && pairs_name != "host" && pairs_name != "device")
    throw mlip::Error("pairs: expected auto, host or device, got '" + pairs_name + "'");
  const auto pairs = pairs_name == "host"     ? mlip::md::PairBuilding::kHost
                     : pairs_name == "device" ? mlip::md::PairBuilding::kDevice
                                              : mlip::md::PairBuilding::kAuto;
  if (warmup < 0) throw mlip::Error("WARMUP: expected a non-negative integer, got '" + std::string(argv[9]) + "'");
  if (evaluation_name != "auto" && evaluation_name != "torchscript")
    throw mlip::Error("evaluation: expected auto or torchscript, got '" + evaluation_name + "'");
  const auto evaluation = evaluation_name == "auto" ? mlip::md::Evaluation::kAuto : mlip::md::Evaluation::kTorchScript;
  mlip::md::Potential potential(argv[1], argv[2], evaluation, pairs);
  Box box = replicated_water(argv[3], potential.type_names(), std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  const int steps = std::atoi(argv[7]);
  if (steps < 1) throw mlip::Error("STEPS: expected a positive integer, got '" + std::string(argv[7]) + "'");
  add_ghosts(box, potential.ghost_cutoff() + 1.0);
  mlip::md::LocalAtoms atoms{box.pos.data(), box.types.data(), int64_t(box.types.size()), box.nlocal};
  atoms.ids = box.ids.data();
  mlip::md::Results out;
  for (int warm = 0; warm < warmup; ++warm) potential.compute(atoms, false, false, out);  // first-call set-up
  potential.reset_timings();
  std::vector<double> step_ms;
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    potential.compute(atoms, false, false, out);  // forces are read back to the host: the device is done
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  const auto& t = potential.timings();
  std::printf("atoms=%lld ghosts=%lld model_atoms=%lld steps=%d seconds=%.4f us_per_atom_step=%.4f "
              "median_ms=%.3f max_ms=%.3f neighbor_list_share=%.3f energy_per_atom=%.6f describe=\"%s\"\n",
              (long long)box.nlocal, (long long)(atoms.natoms - box.nlocal),
              (long long)(t.calls ? t.model_atoms / t.calls : 0), steps, seconds, seconds * 1e6 / (double(steps) * double(box.nlocal)),
              sorted[sorted.size() / 2], sorted.back(), t.neighbor_list / std::max(seconds, 1e-12),
              out.energy / double(box.nlocal), potential.describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mlip::compat::use_the_cpus_blas_kernels();  // as mlip's main() (docs/device.md)
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_potential: %s\n", e.what());
    return 1;
  }
}
