#include "models/se_e2_a/env_matrix.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "models/se_e2_a/env_row.h"
#include "error.h"

namespace mlip::models {
int64_t EnvMatrixParams::nslots() const {
  int64_t n = 0;
  for (auto s : sel) n += s;
  return n;
}

void EnvMatrixParams::validate() const {
  std::ostringstream msg;
  if (!(rcut > 0) || !std::isfinite(rcut)) {
    msg << "descriptor.rcut: expected a positive number, got " << rcut;
  } else if (!(rcut_smth >= 0) || !(rcut_smth < rcut)) {
    msg << "descriptor.rcut_smth: expected a number in [0, rcut = " << rcut << "), got " << rcut_smth;
  } else if (sel.empty()) {
    msg << "descriptor.sel: expected one slot count per type, got an empty list";
  } else {
    for (size_t t = 0; t < sel.size(); ++t)
      if (sel[t] < 0) {
        msg << "descriptor.sel[" << t << "]: expected a non-negative integer, got " << sel[t];
        break;
      }
    if (msg.str().empty() && nslots() == 0) msg << "descriptor.sel: expected at least one slot, got all zeros";
  }
  if (!msg.str().empty()) throw Error(msg.str());
}

double switch_function(double r, double rcut_smth, double rcut, double* dw_dr) {
  if (r < rcut_smth) {
    if (dw_dr) *dw_dr = 0.0;
    return 1.0;
  }
  if (r >= rcut) {
    if (dw_dr) *dw_dr = 0.0;
    return 0.0;
  }
  // w = u^3 (-6u^2 + 15u - 10) + 1 written with v = 1 - u as v^3 (10 - 15v + 6v^2): the same
  // polynomial, without the cancellation of "+ 1" near rcut.
  const double u = (r - rcut_smth) / (rcut - rcut_smth);
  const double v = (rcut - r) / (rcut - rcut_smth);
  if (dw_dr) *dw_dr = -30.0 * u * u * v * v / (rcut - rcut_smth);
  return v * v * v * (10.0 - 15.0 * v + 6.0 * v * v);
}

template <typename Real>
EnvMatrix compute_env_matrix(const data::NeighborList<Real>& nl, const std::vector<int>& types,
                             const EnvMatrixParams& params) {
  data::ensure_kokkos_initialized();
  params.validate();
  const int64_t natoms = nl.natoms;
  const int64_t ntyped = int64_t(types.size());  // centres and the atoms that are only neighbours
  if (ntyped < natoms) {
    std::ostringstream msg;
    msg << "environment matrix: expected at least " << natoms << " atom types, got " << types.size();
    throw Error(msg.str());
  }
  if (nl.cutoff < params.rcut * (1 - 1e-12)) {
    std::ostringstream msg;
    msg << "environment matrix: the neighbour list's cutoff " << nl.cutoff << " is below rcut " << params.rcut;
    throw Error(msg.str());
  }
  const int ntypes = int(params.sel.size());
  if (ntypes > kMaxNeighborTypes) {
    std::ostringstream msg;
    msg << "descriptor.sel: at most " << kMaxNeighborTypes << " types are supported, got " << ntypes;
    throw Error(msg.str());
  }
  for (int64_t i = 0; i < ntyped; ++i)
    if (types[size_t(i)] < 0 || types[size_t(i)] >= ntypes) {
      std::ostringstream msg;
      msg << "environment matrix: atom " << i << " has type " << types[size_t(i)] << ", expected 0.."
          << ntypes - 1 << " (one per descriptor.sel entry)";
      throw Error(msg.str());
    }
  const int64_t nc = params.nslots();
  const auto dtype = std::is_same<Real, double>::value ? torch::kFloat64 : torch::kFloat32;
  const auto opts = torch::TensorOptions().dtype(dtype);

  EnvMatrix env;
  env.rij = torch::empty({natoms, nc, 4}, opts);
  env.drij = torch::empty({natoms, nc, 4, 3}, opts);
  env.vec = torch::empty({natoms, nc, 3}, opts);
  env.nlist = torch::empty({natoms, nc}, torch::TensorOptions().dtype(torch::kInt64));

  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using HostExec = Kokkos::DefaultHostExecutionSpace;
  // The tensors' memory, seen as Kokkos Views (no copies).
  Kokkos::View<Real** [4], Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged> rij(
      env.rij.data_ptr<Real>(), natoms, nc);
  Kokkos::View<Real** [4][3], Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged> drij(
      env.drij.data_ptr<Real>(), natoms, nc);
  Kokkos::View<Real** [3], Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged> vec(
      env.vec.data_ptr<Real>(), natoms, nc);
  Kokkos::View<int64_t**, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged> slots(
      env.nlist.data_ptr<int64_t>(), natoms, nc);

  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  auto shift = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.shift);
  auto nlvec = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.vector);
  auto nldist = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.distance);
  Kokkos::View<int32_t*, Kokkos::HostSpace> type_v("types", ntyped);
  for (int64_t i = 0; i < ntyped; ++i) type_v(i) = types[size_t(i)];
  Kokkos::View<int64_t*, Kokkos::HostSpace> block_start("block_start", ntypes + 1);
  for (int t = 0; t < ntypes; ++t) block_start(t + 1) = block_start(t) + params.sel[size_t(t)];
  Kokkos::View<int64_t[2], Kokkos::HostSpace> counters("counters");

  const Real rc = Real(params.rcut), rs = Real(params.rcut_smth);
  const Real inv_width = Real(1) / (rc - rs);
  const int nt = ntypes;

  Kokkos::parallel_for(
      "mlip::env_matrix", Kokkos::RangePolicy<HostExec, Kokkos::IndexType<int64_t>>(0, natoms),
      [=](int64_t i) {
        // 1. Select, per type block, the nearest neighbours into the slots (pair indices).
        int64_t fill[kMaxNeighborTypes];
        int64_t truncated = 0, dropped = 0;
        int64_t* slot = &slots(i, 0);
        select_neighbors(i, offsets, neighbor, shift, nldist, type_v, block_start, nt, rc, slot, fill, truncated,
                         dropped);
        // 2. Rows and their derivatives; empty slots are zero.
        for (int t = 0; t < nt; ++t) {
          const int64_t base = block_start(t), end = block_start(t + 1);
          for (int64_t s = base; s < end; ++s) {
            if (s - base >= fill[t]) {
              slots(i, s) = -1;
              for (int a = 0; a < 4; ++a) {
                rij(i, s, a) = 0;
                for (int b = 0; b < 3; ++b) drij(i, s, a, b) = 0;
              }
              for (int b = 0; b < 3; ++b) vec(i, s, b) = 0;
              continue;
            }
            const int64_t p = slots(i, s);
            const Real d[3] = {nlvec(p, 0), nlvec(p, 1), nlvec(p, 2)};
            Real row[4], drow[4][3];
            env_row(d, nldist(p), rc, rs, inv_width, row, drow);
            for (int a = 0; a < 4; ++a) {
              rij(i, s, a) = row[a];
              for (int b = 0; b < 3; ++b) drij(i, s, a, b) = drow[a][b];
            }
            for (int b = 0; b < 3; ++b) vec(i, s, b) = d[b];
            slots(i, s) = neighbor(p);
          }
        }
        if (truncated) {
          Kokkos::atomic_add(&counters(0), truncated);
          Kokkos::atomic_add(&counters(1), dropped);
        }
      });
  Kokkos::fence();
  env.truncated_blocks = counters(0);
  env.dropped_neighbors = counters(1);
  return env;
}

template EnvMatrix compute_env_matrix<float>(const data::NeighborList<float>&, const std::vector<int>&,
                                             const EnvMatrixParams&);
template EnvMatrix compute_env_matrix<double>(const data::NeighborList<double>&, const std::vector<int>&,
                                              const EnvMatrixParams&);

EnvStat::EnvStat(int ntypes, int64_t nslots)
    : ntypes_(ntypes), nslots_(nslots), sum_r_(size_t(ntypes)), sum_r2_(size_t(ntypes)),
      sum_a_(size_t(ntypes)), sum_a2_(size_t(ntypes)), count_(size_t(ntypes)) {}

void EnvStat::add(const EnvMatrix& env, const std::vector<int>& types) {
  const torch::Tensor r = env.rij.to(torch::kFloat64).contiguous();
  if (r.dim() != 3 || r.size(1) != nslots_ || r.size(0) != int64_t(types.size()))
    throw Error("environment statistics: environment matrix shape does not match the atoms/slots");
  const double* data = r.data_ptr<double>();
  const int64_t natoms = r.size(0);
  for (int64_t i = 0; i < natoms; ++i) {
    const int t = types[size_t(i)];
    if (t < 0 || t >= ntypes_) throw Error("environment statistics: atom type out of range");
    const double* row = data + i * nslots_ * 4;
    double sr = 0, sr2 = 0, sa = 0, sa2 = 0;
    for (int64_t s = 0; s < nslots_; ++s) {
      sr += row[4 * s];
      sr2 += row[4 * s] * row[4 * s];
      for (int a = 1; a < 4; ++a) {
        sa += row[4 * s + a];
        sa2 += row[4 * s + a] * row[4 * s + a];
      }
    }
    sum_r_[size_t(t)] += sr;
    sum_r2_[size_t(t)] += sr2;
    sum_a_[size_t(t)] += sa;
    sum_a2_[size_t(t)] += sa2;
    ++count_[size_t(t)];
  }
}

torch::Tensor EnvStat::davg() const {
  auto out = torch::zeros({ntypes_, 4}, torch::kFloat64);
  for (int t = 0; t < ntypes_; ++t)
    if (count_[size_t(t)] > 0) out[t][0] = sum_r_[size_t(t)] / double(count_[size_t(t)] * nslots_);
  return out;
}

torch::Tensor EnvStat::dstd() const {
  auto out = torch::ones({ntypes_, 4}, torch::kFloat64);
  for (int t = 0; t < ntypes_; ++t) {
    const double n = double(count_[size_t(t)] * nslots_);
    if (n == 0) continue;
    const double mr = sum_r_[size_t(t)] / n;
    const double ma = sum_a_[size_t(t)] / (3 * n);
    const double std_r = std::sqrt(std::max(0.0, sum_r2_[size_t(t)] / n - mr * mr));
    const double std_a = std::sqrt(std::max(0.0, sum_a2_[size_t(t)] / (3 * n) - ma * ma));
    out[t][0] = std::max(std_r, 1e-2);
    for (int a = 1; a < 4; ++a) out[t][a] = std::max(std_a, 1e-2);
  }
  return out;
}

}  // namespace mlip::models
