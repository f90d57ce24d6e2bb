// md::Potential on a CUDA device (what `pair_style mlip model.pt device cuda` runs, docs/lammps.md)
// against the same frozen model on the CPU: energy, per-atom energies, forces, virial and per-atom
// virials of an MD rank's atoms (owned atoms plus periodic images as ghosts), both models, float32
// and float64, over several calls with moved atoms. Skipped where no CUDA device is visible.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "md/potential.h"
#include "potential_test_util.h"
#include "test_util.h"

namespace mlip {
namespace {

using test::fold;
using test::max_difference;

template <typename T>
struct PotentialCudaTest : ::testing::Test {
  static constexpr bool kFloat32 = std::is_same_v<T, float>;
  static std::string precision() { return kFloat32 ? "float32" : "float64"; }
  // float32: sums over different orders on the two devices (atomic adds on the GPU).
  static double tolerance() { return kFloat32 ? 2e-4 : 1e-10; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PotentialCudaTest, Reals);

void check_cuda_equals_cpu(const std::string& model_path, double tol) {
  md::Potential cpu(model_path, "cpu");
  for (const auto pairs : {md::PairBuilding::kAuto, md::PairBuilding::kHost}) {
    SCOPED_TRACE(pairs == md::PairBuilding::kAuto ? "pairs on the device" : "pairs on the host");
    md::Potential cuda(model_path, "cuda", md::Evaluation::kAuto, pairs);
    // docs/lammps.md "Pairs on the device": a CUDA device builds its pairs there unless told not to.
    EXPECT_EQ(cuda.pairs_on_device(), pairs == md::PairBuilding::kAuto) << cuda.describe();
    EXPECT_TRUE(test::contains(cuda.describe(), "cuda")) << cuda.describe();
    for (int call = 0; call < 3; ++call) {
      // A different frame at each call: nothing may be cached from the call before.
      const test::Frame f = test::random_frame(40, true, 7 + call, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
      ASSERT_GE(9.5 - 1.0, cpu.ghost_cutoff()) << "the images in [-1, 1]^3 must cover the ghost cutoff";
      std::vector<int64_t> owned;
      for (int64_t i = 0; i < f.natoms(); ++i) owned.push_back(i);
      const test::RankAtoms r = test::rank_atoms(f, owned);
      md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
      atoms.ids = r.owner.data();
      md::Results on_cpu, on_cuda;
      cpu.compute(atoms, true, true, on_cpu);
      cuda.compute(atoms, true, true, on_cuda);
      SCOPED_TRACE("call " + std::to_string(call));
      ASSERT_EQ(on_cuda.forces.size(), r.owner.size() * 3);
      ASSERT_EQ(on_cuda.atom_virial.size(), r.owner.size() * 9);
      for (md::Results* out : {&on_cpu, &on_cuda}) {
        out->forces = fold(out->forces, r.owner, f.natoms(), 3);
        out->atom_virial = fold(out->atom_virial, r.owner, f.natoms(), 9);
      }
      EXPECT_NEAR(on_cuda.energy, on_cpu.energy, tol * std::abs(on_cpu.energy));
      for (const auto& [name, a, b] :
           {std::tuple{"atomic energies", &on_cuda.atomic_energy, &on_cpu.atomic_energy},
            std::tuple{"forces", &on_cuda.forces, &on_cpu.forces},
            std::tuple{"per-atom virials", &on_cuda.atom_virial, &on_cpu.atom_virial}}) {
        const auto [diff, scale] = max_difference(*a, *b);
        EXPECT_GT(scale, 0.0) << name << " are all zero: nothing was compared";
        EXPECT_LE(diff, tol * scale) << name << ": largest difference " << diff << ", scale " << scale;
      }
      const auto [diff, scale] = max_difference(std::vector<double>(on_cuda.virial.begin(), on_cuda.virial.end()),
                                                std::vector<double>(on_cpu.virial.begin(), on_cpu.virial.end()));
      EXPECT_LE(diff, tol * scale) << "virial: largest difference " << diff << ", scale " << scale;
    }
  }
}

TYPED_TEST(PotentialCudaTest, SeE2AOnCudaEqualsTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  test::TempDir dir;
  test::write_frozen(dir / "se.pt", test::se_yaml(TestFixture::precision()));
  check_cuda_equals_cpu(dir / "se.pt", TestFixture::tolerance());
}

TYPED_TEST(PotentialCudaTest, EquivariantOnCudaEqualsTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  test::TempDir dir;
  test::write_frozen(dir / "eq.pt", test::equivariant_yaml(TestFixture::precision()));
  check_cuda_equals_cpu(dir / "eq.pt", TestFixture::tolerance());
}

}  // namespace
}  // namespace mlip
