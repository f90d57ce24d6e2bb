// md::Potential (docs/lammps.md) against the frozen model's forward on the whole periodic frame:
// an MD rank's atoms are emulated by owned atoms plus periodic images as ghosts, and the owned
// atoms split in two "ranks" must add up to the whole (energy, forces folded onto their owners,
// virial). Both evaluation paths, both models, float32 and float64.
#include <gtest/gtest.h>

#include <ATen/Context.h>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "error.h"
#include "md/potential.h"
#include "models/capabilities.h"
#include "model_test_util.h"
#include "models/equivariant/equivariant.h"
#include "models/equivariant/equivariant_model.h"
#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_model.h"
#include "archive/model_archive.h"
#include "models/registry.h"
#include "potential_test_util.h"
#include "test_util.h"

namespace mlip {
namespace {

using test::Frame;
using test::equivariant_yaml;
using test::rank_atoms;
using test::RankAtoms;
using test::se_yaml;
using test::write_frozen;
using test::check_against_forward;

template <typename T>
struct PotentialTest : ::testing::Test {
  static constexpr bool kFloat32 = std::is_same_v<T, float>;
  static std::string precision() { return kFloat32 ? "float32" : "float64"; }
  static double tolerance() { return kFloat32 ? 2e-4 : 1e-10; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PotentialTest, Reals);

TYPED_TEST(PotentialTest, SeE2ATwoRanksEqualTheWholeFrameBothPaths) {
  test::TempDir dir;
  const double r_max = write_frozen(dir / "se.pt", se_yaml(TestFixture::precision()));
  for (auto evaluation : {md::Evaluation::kAuto, md::Evaluation::kTorchScript})
    for (bool ids : {false, true}) {
      SCOPED_TRACE(std::string(evaluation == md::Evaluation::kAuto ? "hand-written inference" : "TorchScript forward") +
                   (ids ? ", ghosts folded by id" : ", every ghost an atom"));
      check_against_forward(dir / "se.pt", r_max, evaluation, TestFixture::tolerance(), ids);
    }
  md::Potential fast(dir / "se.pt", "cpu");
  EXPECT_NE(fast.describe().find("hand-written"), std::string::npos) << fast.describe();
  EXPECT_EQ(fast.message_layers(), 1);
}

TYPED_TEST(PotentialTest, EquivariantTwoRanksEqualTheWholeFrame) {
  test::TempDir dir;
  const double r_max = write_frozen(dir / "eq.pt", equivariant_yaml(TestFixture::precision()));
  md::Potential p(dir / "eq.pt", "cpu");
  EXPECT_EQ(p.message_layers(), 2);
  EXPECT_DOUBLE_EQ(p.ghost_cutoff(), 2 * r_max);
  for (auto evaluation : {md::Evaluation::kAuto, md::Evaluation::kTorchScript})
    for (bool ids : {false, true}) {
      SCOPED_TRACE(std::string(evaluation == md::Evaluation::kAuto ? "own inference" : "TorchScript forward") +
                   (ids ? ", ghosts folded by id" : ", every ghost an atom"));
      check_against_forward(dir / "eq.pt", r_max, evaluation, TestFixture::tolerance(), ids);
    }
}

/// max |a - b| over max |b| (1 where b is all zero).
double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) diff = std::max(diff, std::abs(a[k] - b[k]));
  for (double v : b) scale = std::max(scale, std::abs(v));
  return a.size() == b.size() ? diff / (scale > 0 ? scale : 1.0) : 1.0;
}

// The equivariant model's own inference (models/equivariant/equivariant_inference.h) against the
// frozen TorchScript forward on the same rank's atoms: energy, forces, virial, per-atom energies
// and virials; a periodic triclinic box and a cluster; ghosts folded by id and not.
TYPED_TEST(PotentialTest, EquivariantOwnInferenceEqualsTheForward) {
  test::TempDir dir;
  write_frozen(dir / "eq.pt", equivariant_yaml(TestFixture::precision()));
  md::Potential own(dir / "eq.pt", "cpu", md::Evaluation::kAuto);
  md::Potential script(dir / "eq.pt", "cpu", md::Evaluation::kTorchScript);
  EXPECT_NE(own.describe().find("training path"), std::string::npos) << own.describe();
  const double tol = TestFixture::tolerance();
  for (bool periodic : {true, false}) {
    const Frame f = test::random_frame(40, periodic, 7, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
    std::vector<int64_t> owned;
    for (int64_t i = 0; i < f.natoms(); i += 3) owned.push_back(i);
    const RankAtoms r = rank_atoms(f, owned, periodic);
    for (bool ids : {false, true}) {
      SCOPED_TRACE(std::string(periodic ? "periodic" : "cluster") + (ids ? ", ghosts folded by id" : ""));
      md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
      if (ids) atoms.ids = r.owner.data();
      md::Results a, b;
      own.compute(atoms, true, true, a);
      script.compute(atoms, true, true, b);
      EXPECT_NEAR(a.energy, b.energy, tol * std::abs(b.energy));
      EXPECT_LT(relative_difference(a.forces, b.forces), tol) << "forces";
      EXPECT_LT(relative_difference({a.virial.begin(), a.virial.end()}, {b.virial.begin(), b.virial.end()}), tol)
          << "virial";
      EXPECT_LT(relative_difference(a.atomic_energy, b.atomic_energy), tol) << "per-atom energies";
      EXPECT_LT(relative_difference(a.atom_virial, b.atom_virial), tol) << "per-atom virials";
      double fmax = 0;
      for (double v : b.forces) fmax = std::max(fmax, std::abs(v));
      EXPECT_GT(fmax, 1e-3) << "forces that can differ";
    }
  }
}

/// MD ranks emulated by threads of one process, with their own GhostExchange: the owned rows
/// of every rank meet in one table by atom (forward), and the ghosts' rows are added to their
/// atoms' owners (reverse), between barriers, as LAMMPS' communication does between processes.
class ThreadRanks {
 public:
  ThreadRanks(int ranks, int64_t atoms) : ranks_(ranks), atoms_(atoms) {}

  /// Rank q starts once ranks 0..q-1 have reached their first exchange: the neighbour lists
  /// (Kokkos, one host thread at a time) are built one rank after the other.
  void wait_turn(int q) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return started_ >= q || failed_; });
  }
  /// Called by a rank (its thread) at its first exchange or collective, once it has built its
  /// lists; later calls of the same rank count nothing.
  void started() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ranks_.insert(std::this_thread::get_id()).second) return;
    ++started_;
    cv_.notify_all();
  }

  /// A rank failed: the others stop waiting (their barrier throws) instead of hanging.
  void fail() {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    cv_.notify_all();
  }

  /// Runs `work(q)` for every rank q on a thread of its own, each in its turn (wait_turn), and
  /// returns the ranks' errors, one line each ("" when none failed).
  std::string run(const std::function<void(int)>& work) {
    std::vector<std::string> errors(static_cast<size_t>(ranks_));
    std::vector<std::thread> threads;
    for (int q = 0; q < ranks_; ++q)
      threads.emplace_back([&, q] {
        wait_turn(q);
        try {
          work(q);
        } catch (const std::exception& e) {
          errors[size_t(q)] = e.what();
          fail();
        }
      });
    for (auto& t : threads) t.join();
    std::string all;
    for (int q = 0; q < ranks_; ++q)
      if (!errors[size_t(q)].empty()) all += "rank " + std::to_string(q) + ": " + errors[size_t(q)] + "\n";
    return all;
  }

  class Exchange : public md::GhostExchange {
   public:
    Exchange(ThreadRanks& world, const RankAtoms& r) : world_(world), r_(r) {}
    void forward(double* rows, int64_t width) override {
      if (forward_calls == 0) world_.started();
      world_.table(width);
      for (int64_t k = 0; k < r_.nlocal; ++k)
        std::copy(rows + k * width, rows + (k + 1) * width, world_.table_.begin() + r_.owner[size_t(k)] * width);
      world_.barrier();
      for (size_t k = size_t(r_.nlocal); k < r_.owner.size(); ++k)
        std::copy(world_.table_.begin() + r_.owner[k] * width, world_.table_.begin() + (r_.owner[k] + 1) * width,
                  rows + int64_t(k) * width);
      world_.barrier();
      ++forward_calls;
    }
    void reverse(double* rows, int64_t width) override {
      world_.table(width);
      {
        std::lock_guard<std::mutex> lock(world_.mutex_);
        for (size_t k = size_t(r_.nlocal); k < r_.owner.size(); ++k)
          for (int64_t c = 0; c < width; ++c) world_.table_[size_t(r_.owner[k] * width + c)] += rows[int64_t(k) * width + c];
      }
      world_.barrier();
      for (int64_t k = 0; k < r_.nlocal; ++k)
        for (int64_t c = 0; c < width; ++c) rows[k * width + c] += world_.table_[size_t(r_.owner[size_t(k)] * width + c)];
      world_.barrier();
      ++reverse_calls;
    }
    int forward_calls = 0, reverse_calls = 0;

   private:
    ThreadRanks& world_;
    const RankAtoms& r_;
  };

  /// Sums and gathers over the threads (what MPI_Allreduce and MPI_Allgatherv do between processes).
  class Collectives : public md::RankCollectives {
   public:
    Collectives(ThreadRanks& world, int rank) : world_(world), rank_(rank) {}
    void sum(double* values, int64_t n) override {
      world_.started();  // a model without exchanges (se_e2_a) reaches its collectives first
      world_.barrier();
      {
        std::lock_guard<std::mutex> lock(world_.mutex_);
        if (world_.table_round_ != world_.round_) world_.table_.assign(size_t(n), 0.0), world_.table_round_ = world_.round_;
        for (int64_t k = 0; k < n; ++k) world_.table_[size_t(k)] += values[k];
      }
      world_.barrier();
      std::copy(world_.table_.begin(), world_.table_.begin() + n, values);
      world_.barrier();
      ++calls;
    }
    int64_t gather(const double* mine, int64_t n, std::vector<double>& all) override {
      world_.started();
      world_.barrier();
      {
        std::lock_guard<std::mutex> lock(world_.mutex_);
        if (world_.parts_.size() != size_t(world_.ranks_)) world_.parts_.assign(size_t(world_.ranks_), {});
        world_.parts_[size_t(rank_)].assign(mine, mine + n);
      }
      world_.barrier();
      all.clear();
      int64_t first = 0;
      for (int q = 0; q < world_.ranks_; ++q) {
        if (q == rank_) first = int64_t(all.size());
        all.insert(all.end(), world_.parts_[size_t(q)].begin(), world_.parts_[size_t(q)].end());
      }
      world_.barrier();
      ++calls;
      return first;
    }
    int calls = 0;

   private:
    ThreadRanks& world_;
    int rank_;
  };

 private:
  /// All ranks wait here until every one has arrived.
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round || failed_; });
    }
    if (failed_) throw std::runtime_error("another rank failed");
  }
  /// The shared table, zeroed, [atoms, width]; the first rank to arrive resets it.
  void table(int64_t width) {
    barrier();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (table_round_ != round_) table_.assign(size_t(atoms_ * width), 0.0), table_round_ = round_;
    }
    barrier();
  }

  int ranks_;
  int64_t atoms_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t round_ = 0, table_round_ = -1;
  bool failed_ = false;
  int started_ = 0;
  std::set<std::thread::id> started_ranks_;  // the ranks (threads) counted in started_
  std::vector<double> table_;
  std::vector<std::vector<double>> parts_;  // Collectives::gather's, one per rank
};

std::string equivariant_deep_yaml(const std::string& precision) {
  return "  type: equivariant\n  type_map: [O, H]\n  r_max: 2.8\n  num_features: 4\n  l_max: 2\n"
         "  num_layers: 3\n  correlation: 2\n  readout: every_layer\n  avg_num_neighbors: 8\n  precision: " +
         precision + "\n  seed: 6\n";
}

// Features exchanged between ranks (docs/lammps.md "Features exchanged between ranks"): 1, 2 and
// 3 ranks (threads with their own exchange) owning parts of a periodic triclinic frame, each
// with every other atom and image as a ghost (folded by id or not), add up to the
// frozen forward on the whole frame (energy, forces, virial), and per-atom energies and virials
// equal those of the TorchScript forward on each rank's atoms with ghosts out to L · r_max.
TYPED_TEST(PotentialTest, EquivariantFeaturesExchangedBetweenRanksEqualTheWholeFrame) {
  test::TempDir dir;
  const double tol = TestFixture::tolerance();
  // The deep model with its pseudotensors and without (its record must carry the choice).
  const std::string natural = equivariant_deep_yaml(TestFixture::precision()) + "  pseudotensors: false\n";
  for (const std::string& yaml :
       {equivariant_yaml(TestFixture::precision()), equivariant_deep_yaml(TestFixture::precision()), natural}) {
    const double r_max = write_frozen(dir / "eq.pt", yaml);
    const Frame f = test::random_frame(40, true, 7, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
    archive::ExtraFiles extra;
    torch::jit::Module module = archive::load_model(dir / "eq.pt", extra);
    const auto dtype = TestFixture::kFloat32 ? torch::kFloat32 : torch::kFloat64;
    const test::ModelResult ref = test::run_deploy(module, f, r_max, dtype);
    for (int ranks : {1, 2, 3})
    for (bool ids : {false, true}) {
      SCOPED_TRACE(std::to_string(ranks) + " rank(s), " + (yaml.find("correlation") != std::string::npos ? "3 layers, correlation 2" : "2 layers") +
                   (yaml.find("pseudotensors") != std::string::npos ? ", natural irreps only" : "") +
                   (ids ? ", ghosts folded by id" : ", every ghost an atom"));
      std::vector<RankAtoms> rank(static_cast<size_t>(ranks));
      for (int q = 0; q < ranks; ++q) {
        std::vector<int64_t> owned;
        for (int64_t i = q; i < f.natoms(); i += ranks) owned.push_back(i);
        rank[size_t(q)] = rank_atoms(f, owned);
      }
      ThreadRanks world(ranks, f.natoms());
      std::vector<std::unique_ptr<md::Potential>> potential;
      std::vector<std::unique_ptr<ThreadRanks::Exchange>> exchange;
      for (int q = 0; q < ranks; ++q) {
        potential.push_back(std::make_unique<md::Potential>(dir / "eq.pt", "cpu"));
        exchange.push_back(std::make_unique<ThreadRanks::Exchange>(world, rank[size_t(q)]));
      }
      ASSERT_GT(potential[0]->exchange_width(), 0);
      EXPECT_DOUBLE_EQ(potential[0]->ghost_cutoff(true), r_max);
      std::vector<md::Results> out(static_cast<size_t>(ranks));
      ASSERT_EQ(world.run([&](int q) {
        const RankAtoms& r = rank[size_t(q)];
        md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
        atoms.exchange = exchange[size_t(q)].get();
        if (ids) atoms.ids = r.owner.data();
        potential[size_t(q)]->compute(atoms, true, true, out[size_t(q)]);
      }),
                "");
      double energy = 0;
      std::vector<double> forces(size_t(f.natoms()) * 3, 0.0), virial(9, 0.0), atom_virial(9, 0.0);
      // Per atom (by the atom each row images): energies and virials, exchanged and TorchScript.
      const size_t na = size_t(f.natoms());
      std::vector<double> atomic(na, 0.0), atomic_script(na, 0.0), per_atom(na * 9, 0.0), per_atom_script(na * 9, 0.0);
      md::Potential script(dir / "eq.pt", "cpu", md::Evaluation::kTorchScript);
      ASSERT_GE(9.5 - 1.0, script.ghost_cutoff()) << "the images in [-1, 1]^3 must cover the ghost cutoff";
      for (int q = 0; q < ranks; ++q) {
        {
          const RankAtoms& r = rank[size_t(q)];
          md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
          atoms.ids = r.owner.data();
          md::Results b;
          script.compute(atoms, true, true, b);
          for (int64_t k = 0; k < r.nlocal; ++k) {
            atomic[size_t(r.owner[size_t(k)])] += out[size_t(q)].atomic_energy[size_t(k)];
            atomic_script[size_t(r.owner[size_t(k)])] += b.atomic_energy[size_t(k)];
          }
          for (size_t k = 0; k < r.owner.size(); ++k)
            for (size_t c = 0; c < 9; ++c) {
              per_atom[size_t(r.owner[k]) * 9 + c] += out[size_t(q)].atom_virial[k * 9 + c];
              per_atom_script[size_t(r.owner[k]) * 9 + c] += b.atom_virial[k * 9 + c];
            }
        }
        const RankAtoms& r = rank[size_t(q)];
        const md::Results& o = out[size_t(q)];
        const int layers = yaml.find("num_layers: 3") != std::string::npos ? 3 : 2;
        EXPECT_EQ(exchange[size_t(q)]->forward_calls, layers - 1);
        EXPECT_EQ(exchange[size_t(q)]->reverse_calls, layers - 1);
        // Nodes: the owned atoms and their neighbours within r_max, an image of a present atom
        // folded onto it (with ids: at most the frame's atoms; without, many images).
        if (ids) EXPECT_LE(potential[size_t(q)]->timings().model_atoms, f.natoms());
        else EXPECT_GT(potential[size_t(q)]->timings().model_atoms, r.nlocal);
        energy += o.energy;
        double atomic_sum = 0;
        for (double e : o.atomic_energy) atomic_sum += e;
        EXPECT_NEAR(atomic_sum, o.energy, 1e-9 * std::abs(o.energy));
        for (size_t k = 0; k < r.owner.size(); ++k)
          for (int d = 0; d < 3; ++d) forces[size_t(r.owner[k] * 3 + d)] += o.forces[k * 3 + size_t(d)];
        for (int c = 0; c < 9; ++c) virial[size_t(c)] += o.virial[size_t(c)];
        for (size_t k = 0; k < r.owner.size(); ++k)
          for (int c = 0; c < 9; ++c) atom_virial[size_t(c)] += o.atom_virial[k * 9 + size_t(c)];
      }
      EXPECT_NEAR(energy, ref.energy, tol * std::abs(ref.energy));
      const auto rf = ref.forces.contiguous();
      EXPECT_LT(relative_difference(forces, {rf.data_ptr<double>(), rf.data_ptr<double>() + rf.numel()}), tol) << "forces";
      const auto rv = ref.virial.contiguous();
      const std::vector<double> rvv(rv.data_ptr<double>(), rv.data_ptr<double>() + 9);
      EXPECT_LT(relative_difference(virial, rvv), tol) << "virial";
      EXPECT_LT(relative_difference(atom_virial, rvv), tol) << "per-atom virials, summed";
      EXPECT_LT(relative_difference(atomic, atomic_script), tol) << "per-atom energies";
      EXPECT_LT(relative_difference(per_atom, per_atom_script), tol) << "per-atom virials";
    }
  }
}

// A model with charges across ranks (docs/lammps.md "Long range across ranks"): 1, 2 and 3 ranks
// (threads with their own exchange and sums) owning parts of a periodic triclinic frame (the
// reciprocal sum, k-vectors and mesh) or of a cluster (the direct sum over the gathered atoms)
// add up to the frozen forward on the whole frame: energy, forces, virial, and each atom's charge;
// for both models (the equivariant model's graph with its features exchanged; se_e2_a's neighbour
// list, its charges from the hand-written evaluation's first pass).
TYPED_TEST(PotentialTest, LongRangeRanksEqualTheWholeFrame) {
 for (const bool se : {false, true}) {
  SCOPED_TRACE(se ? "se_e2_a" : "equivariant");
  test::TempDir dir;
  const double tol = TestFixture::tolerance();
  const double r_max =
      write_frozen(dir / "lr.pt", (se ? se_yaml(TestFixture::precision()) : equivariant_yaml(TestFixture::precision())) +
                                      "  long_range: {sigma: 1.0, kspace_spacing: 1.5, total_charge: 0.5}\n");
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(dir / "lr.pt", extra);
  const auto dtype = TestFixture::kFloat32 ? torch::kFloat32 : torch::kFloat64;
  EXPECT_THROW(md::Potential(dir / "lr.pt", "cpu", md::Evaluation::kTorchScript), Error);
  for (auto [periodic, solver] : {std::pair{true, md::LongRangeSolver::kEwald}, std::pair{true, md::LongRangeSolver::kMesh},
                                  std::pair{false, md::LongRangeSolver::kAuto}}) {
    const Frame f = test::random_frame(40, periodic, 7, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
    const test::ModelResult ref = test::run_deploy(module, f, r_max, dtype);
    ASSERT_TRUE(ref.charges.defined());
    EXPECT_GT(ref.charges.abs().max().item<double>(), 1e-3) << "charges that can matter";
    // The mesh approximates the k-vector sum (docs/long_range.md "On a mesh"): its own tolerance.
    const double t = solver == md::LongRangeSolver::kMesh ? std::max(tol, 1e-5) : tol;
    for (int ranks : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(ranks) + " rank(s), " +
                   (periodic ? solver == md::LongRangeSolver::kMesh ? "periodic, mesh" : "periodic, k-vectors"
                             : "cluster"));
      std::vector<RankAtoms> rank(static_cast<size_t>(ranks));
      for (int q = 0; q < ranks; ++q) {
        std::vector<int64_t> owned;
        for (int64_t i = q; i < f.natoms(); i += ranks) owned.push_back(i);
        rank[size_t(q)] = rank_atoms(f, owned, periodic);
      }
      ThreadRanks world(ranks, f.natoms());
      std::vector<std::unique_ptr<md::Potential>> potential;
      std::vector<std::unique_ptr<ThreadRanks::Exchange>> exchange;
      std::vector<std::unique_ptr<ThreadRanks::Collectives>> sums;
      for (int q = 0; q < ranks; ++q) {
        potential.push_back(std::make_unique<md::Potential>(dir / "lr.pt", "cpu"));
        potential.back()->set_long_range_solver(solver);
        exchange.push_back(std::make_unique<ThreadRanks::Exchange>(world, rank[size_t(q)]));
        sums.push_back(std::make_unique<ThreadRanks::Collectives>(world, q));
      }
      ASSERT_TRUE(potential[0]->long_range());
      std::vector<md::Results> out(static_cast<size_t>(ranks));
      ASSERT_EQ(world.run([&](int q) {
        const RankAtoms& r = rank[size_t(q)];
        md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
        atoms.exchange = exchange[size_t(q)].get();
        atoms.ids = r.owner.data();
        atoms.cell = f.cell.empty() ? nullptr : f.cell.data();
        atoms.periodic = periodic;
        atoms.ranks = sums[size_t(q)].get();
        // Per-atom virials of the mesh's sum are refused (docs/lammps.md "Long range across ranks").
        potential[size_t(q)]->compute(atoms, true, solver != md::LongRangeSolver::kMesh, out[size_t(q)]);
      }),
                "");
      double energy = 0, atomic_sum = 0;
      std::vector<double> forces(size_t(f.natoms()) * 3, 0.0), virial(9, 0.0), atom_virial(9, 0.0),
          charges(size_t(f.natoms()), 0.0);
      for (int q = 0; q < ranks; ++q) {
        const RankAtoms& r = rank[size_t(q)];
        const md::Results& o = out[size_t(q)];
        EXPECT_GT(sums[size_t(q)]->calls, 0);
        energy += o.energy;
        for (double e : o.atomic_energy) atomic_sum += e;
        ASSERT_EQ(int64_t(o.charges.size()), r.nlocal);
        for (int64_t k = 0; k < r.nlocal; ++k) charges[size_t(r.owner[size_t(k)])] = o.charges[size_t(k)];
        for (size_t k = 0; k < r.owner.size(); ++k)
          for (int d = 0; d < 3; ++d) forces[size_t(r.owner[k] * 3 + d)] += o.forces[k * 3 + size_t(d)];
        for (int c = 0; c < 9; ++c) virial[size_t(c)] += o.virial[size_t(c)];
        if (solver != md::LongRangeSolver::kMesh)
          for (size_t k = 0; k < r.owner.size(); ++k)
            for (int c = 0; c < 9; ++c) atom_virial[size_t(c)] += o.atom_virial[k * 9 + size_t(c)];
      }
      EXPECT_NEAR(energy, ref.energy, t * std::abs(ref.energy));
      EXPECT_NEAR(atomic_sum, energy, 1e-9 * std::abs(energy));
      const auto rf = ref.forces.contiguous();
      EXPECT_LT(relative_difference(forces, {rf.data_ptr<double>(), rf.data_ptr<double>() + rf.numel()}), t) << "forces";
      const auto rv = ref.virial.contiguous();
      const std::vector<double> rvv(rv.data_ptr<double>(), rv.data_ptr<double>() + 9);
      EXPECT_LT(relative_difference(virial, rvv), t) << "virial";
      if (solver != md::LongRangeSolver::kMesh) {
        EXPECT_LT(relative_difference(atom_virial, rvv), t) << "per-atom virials, summed";
      }
      const auto rq = ref.charges.contiguous();
      EXPECT_LT(relative_difference(charges, {rq.data_ptr<double>(), rq.data_ptr<double>() + rq.numel()}), t)
          << "charges";
    }
  }
 }
}

// Ranks without pairs (an atom alone, a far pair) or without atoms: the own inference gives the
// forward's energy (the atoms' per-type energies) and zero forces, and an empty rank nothing.
TEST(Potential, EquivariantOwnInferenceWithoutPairsOrAtoms) {
  test::TempDir dir;
  write_frozen(dir / "eq.pt", equivariant_yaml("float64"));
  md::Potential own(dir / "eq.pt", "cpu", md::Evaluation::kAuto);
  md::Potential script(dir / "eq.pt", "cpu", md::Evaluation::kTorchScript);
  const std::vector<double> far = {0, 0, 0, 10, 0, 0};  // 10 Å apart: no pair within r_max 3
  const std::vector<int> types = {0, 1};
  for (int64_t natoms : {0, 1, 2}) {
    SCOPED_TRACE(std::to_string(natoms) + " atom(s)");
    md::LocalAtoms atoms{far.data(), types.data(), natoms, natoms};
    md::Results a, b;
    own.compute(atoms, true, true, a);
    script.compute(atoms, true, true, b);
    EXPECT_NEAR(a.energy, b.energy, 1e-12 * std::max(1.0, std::abs(b.energy)));
    ASSERT_EQ(a.forces.size(), size_t(natoms) * 3);
    for (double f : a.forces) EXPECT_EQ(f, 0.0);
    EXPECT_EQ(a.atomic_energy.size(), size_t(natoms));
    for (double v : a.virial) EXPECT_EQ(v, 0.0);
  }
}

TEST(Potential, GhostsImagingPresentAtomsAreFolded) {
  // One rank owning the whole periodic frame: with ids, every ghost is an image of an owned atom,
  // so the message-passing model evaluates exactly the frame's atoms, with the same results.
  test::TempDir dir;
  write_frozen(dir / "eq.pt", equivariant_yaml("float64"));
  const Frame f = test::random_frame(30, true, 11, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
  std::vector<int64_t> all(size_t(f.natoms()));
  for (int64_t i = 0; i < f.natoms(); ++i) all[size_t(i)] = i;
  const RankAtoms r = rank_atoms(f, all);
  md::Results folded, unfolded;
  md::Potential with_ids(dir / "eq.pt", "cpu"), without_ids(dir / "eq.pt", "cpu");
  md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
  without_ids.compute(atoms, false, false, unfolded);
  atoms.ids = r.owner.data();
  with_ids.compute(atoms, false, false, folded);
  EXPECT_EQ(with_ids.timings().model_atoms, f.natoms());
  EXPECT_GT(without_ids.timings().model_atoms, 3 * f.natoms()) << "ghosts within one hop are atoms of their own";
  EXPECT_NEAR(folded.energy, unfolded.energy, 1e-10 * std::abs(unfolded.energy));
  // Folded, the forces sit on the owned rows; unfolded, the images' forces must be added up.
  std::vector<double> summed(size_t(f.natoms()) * 3, 0.0);
  for (size_t k = 0; k < r.owner.size(); ++k)
    for (int d = 0; d < 3; ++d) summed[size_t(r.owner[k] * 3 + d)] += unfolded.forces[k * 3 + size_t(d)];
  for (int64_t k = 0; k < f.natoms() * 3; ++k) EXPECT_NEAR(folded.forces[size_t(k)], summed[size_t(k)], 1e-10);
  for (size_t k = size_t(f.natoms()) * 3; k < folded.forces.size(); ++k) ASSERT_EQ(folded.forces[k], 0.0);
  // The same id owned twice is an error, not a silent double count.
  std::vector<int64_t> ids = r.owner;
  ids[1] = ids[0];
  atoms.ids = ids.data();
  EXPECT_TRUE(test::contains(test::error_of([&] { with_ids.compute(atoms, false, false, folded); }),
                             "atom id 0 is owned twice"));
}

TYPED_TEST(PotentialTest, OverlappingAtomsAndNonFiniteEnergiesAreErrors) {
  // Two atoms on top of each other, and a model whose energy is NaN: errors naming the atoms
  // (docs/lammps.md "Errors"), on both evaluation paths of both models.
  test::TempDir dir;
  const Frame f = test::random_frame(24, true, 7, 8.0, {0.8, -0.6, 0.5}, 0.9, 0.35);
  std::vector<int64_t> all(size_t(f.natoms()));
  for (int64_t i = 0; i < f.natoms(); ++i) all[size_t(i)] = i;
  RankAtoms r = rank_atoms(f, all);
  for (const std::string& model : {std::string("se"), std::string("eq")}) {
    const std::string yaml = model == "se" ? se_yaml(TestFixture::precision()) : equivariant_yaml(TestFixture::precision());
    write_frozen(dir / (model + ".pt"), yaml);
    write_frozen(dir / (model + "-nan.pt"), yaml, true);
    for (md::Evaluation path : {md::Evaluation::kAuto, md::Evaluation::kTorchScript}) {
      SCOPED_TRACE(model + (path == md::Evaluation::kAuto ? " auto" : " torchscript"));
      md::Results out;
      md::Potential nan_model(dir / (model + "-nan.pt"), "cpu", path);
      md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal, r.owner.data()};
      EXPECT_TRUE(test::contains(test::error_of([&] { nan_model.compute(atoms, false, false, out); }),
                                 "MD atoms: the model's energy is"));
      std::vector<double> pos = r.pos;
      for (int d = 0; d < 3; ++d) pos[size_t(5 * 3 + d)] = pos[size_t(2 * 3 + d)];
      atoms.positions = pos.data();
      md::Potential p(dir / (model + ".pt"), "cpu", path);
      EXPECT_TRUE(test::contains(test::error_of([&] { p.compute(atoms, false, false, out); }),
                                 "MD atoms: atoms id 2 and id 5 are 0 Å apart, expected at least 0.001 Å"));
      atoms.positions = r.pos.data();
      EXPECT_NO_THROW(p.compute(atoms, false, false, out));
      EXPECT_TRUE(std::isfinite(out.energy));
    }
  }
}

TEST(Potential, RefusesWhatItCannotRun) {
  test::TempDir dir;
  write_frozen(dir / "se.pt", se_yaml("float64"));
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "missing.pt", "cpu"); }), "missing.pt: no such file"));
  {
    // A module without deploy_interface(): frozen by an mlip that could not leave ghosts out.
    torch::jit::Module old("old_model");
    old.define("def forward(self, data: Dict[str, Tensor]) -> Dict[str, Tensor]:\n  return data\n");
    archive::save_module_atomically(old, {{"model_type", "se_e2_a"}, {"r_max", "3.5"}, {"type_names", "O H"},
                                        {"model_dtype", "float64"}, {"config", "model: {}"}}, dir / "old.pt", "the model");
    EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "old.pt", "cpu"); }), "frozen by an older mlip"));
  }
  test::write_text(dir / "text.pt", "not a model");
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "text.pt", "cpu"); }), "not a TorchScript model"));
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "gpu"); }),
                             "expected cpu, cuda or cuda:K, got \"gpu\""));
  if (!at::hasCUDA()) {
    EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "cuda"); }), "no CUDA support"));
  }
  md::Potential p(dir / "se.pt", "cpu");
  std::vector<double> pos = {0, 0, 0, 1, 0, 0};
  std::vector<int> types = {0, 5};
  md::Results out;
  EXPECT_TRUE(test::contains(test::error_of([&] { p.compute({pos.data(), types.data(), 2, 2}, false, false, out); }),
                             "atom 1 has model type 5, expected 0..1"));
}

/// Rewrites the frozen model at `path` with the extra file `capabilities` set to `text`.
void set_capabilities(const std::string& path, const std::string& text) {
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(path, extra);
  extra["capabilities"] = text;
  archive::save_module_atomically(module, extra, path, "the model");
}

// A frozen model's capabilities (docs/deploy.md "Capabilities") are what MD uses: message
// layers and cutoff from them, the model's own inference where they list the device, and a
// contradiction with the other metadata or a missing line is an error naming both.
TEST(Potential, UsesAndChecksTheFrozenCapabilities) {
  test::TempDir dir;
  write_frozen(dir / "eq.pt", equivariant_yaml("float64"));
  write_frozen(dir / "se.pt", se_yaml("float64"));
  // Without capabilities (frozen before they existed): derived from the stored config.
  EXPECT_EQ(md::Potential(dir / "eq.pt", "cpu").message_layers(), 2);
  EXPECT_TRUE(test::contains(md::Potential(dir / "se.pt", "cpu").describe(), "hand-written se_e2_a inference"));
  // As freeze writes them.
  const auto eq = models::capabilities_of(*models::parse_model_settings("model:\n" + equivariant_yaml("float64"), "t"));
  EXPECT_EQ(eq.message_layers, 2);
  EXPECT_EQ(eq.inference, std::vector<std::string>{"cpu"});
  models::Capabilities wider = eq;
  wider.message_layers = 3;  // MD takes the layers from the capabilities
  set_capabilities(dir / "eq.pt", wider.to_text());
  EXPECT_EQ(md::Potential(dir / "eq.pt", "cpu").message_layers(), 3);
  EXPECT_DOUBLE_EQ(md::Potential(dir / "eq.pt", "cpu").cutoff(), 3.0);

  const auto se = models::capabilities_of(*models::parse_model_settings("model:\n" + se_yaml("float64"), "t"));
  EXPECT_EQ(se.inference, std::vector<std::string>{"cpu"});
  set_capabilities(dir / "se.pt", se.to_text());
  EXPECT_TRUE(test::contains(md::Potential(dir / "se.pt", "cpu").describe(), "hand-written se_e2_a inference"));
  models::Capabilities no_own = se;
  no_own.inference.clear();  // no own inference listed: the TorchScript forward
  set_capabilities(dir / "se.pt", no_own.to_text());
  EXPECT_TRUE(test::contains(md::Potential(dir / "se.pt", "cpu").describe(), "TorchScript forward"));

  models::Capabilities wrong = se;
  wrong.dtype = "float32";
  set_capabilities(dir / "se.pt", wrong.to_text());
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "cpu"); }),
                             "capabilities: dtype is \"float32\", but the model's metadata says \"float64\""));
  wrong = se;
  wrong.type_map = {"H", "O"};
  set_capabilities(dir / "se.pt", wrong.to_text());
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "cpu"); }),
                             "capabilities: type_map is \"H O\", but the model's metadata says \"O H\""));
  wrong = se;
  wrong.devices = {"cuda"};
  set_capabilities(dir / "se.pt", wrong.to_text());
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "cpu"); }),
                             "device cpu: this model runs on cuda"));
  std::string text = se.to_text();
  text.erase(text.find("cutoff:"), text.find('\n', text.find("cutoff:")) - text.find("cutoff:") + 1);
  set_capabilities(dir / "se.pt", text);
  EXPECT_TRUE(test::contains(test::error_of([&] { md::Potential(dir / "se.pt", "cpu"); }),
                             "capabilities: no 'cutoff' line"));
  set_capabilities(dir / "se.pt", se.to_text() + "a later key: with a value\n");
  EXPECT_NO_THROW(md::Potential(dir / "se.pt", "cpu"));
}

}  // namespace
}  // namespace mlip
