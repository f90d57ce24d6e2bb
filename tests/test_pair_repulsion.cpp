// model.pair_repulsion (docs/repulsion.md): the ZBL pair energy and its switch (derivative by
// finite differences, zero with two derivatives at outer, continuous at inner), the frozen forward
// of both models against its twin without repulsion plus a brute-force pair sum over periodic
// images, forces by finite differences of the frozen forward, mlip's own MD inference against the
// forward on two ranks, the training labels' correction, and the input's errors.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>

#include "archive/model_archive.h"
#include "md/potential.h"
#include "model_test_util.h"
#include "models/pair_repulsion.h"
#include "models/registry.h"
#include "models/repulsion_labels.h"
#include "potential_test_util.h"
#include "test_util.h"

namespace {

using namespace mlip;
using mlip::test::Frame;

const models::PairRepulsionSettings kZbl{"zbl", 0.8, 2.0};
const std::vector<std::string> kTypes{"O", "H"};

TEST(ZblRepulsion, DerivativeIsTheEnergysSlope) {
  const models::ZblRepulsion zbl(kZbl, kTypes);
  for (int ti = 0; ti < 2; ++ti)
    for (int tj = 0; tj < 2; ++tj)
      for (double r = 0.15; r < 2.1; r += 0.0137) {
        double e = 0, de = 0, ep = 0, em = 0, unused = 0;
        const double h = 1e-6;
        zbl.evaluate(ti, tj, r, e, de);
        zbl.evaluate(ti, tj, r + h, ep, unused);
        zbl.evaluate(ti, tj, r - h, em, unused);
        if (std::abs(r - kZbl.inner) < 2 * h || std::abs(r - kZbl.outer) < 2 * h) continue;
        EXPECT_NEAR(de, (ep - em) / (2 * h), 1e-6 * std::max(1.0, std::abs(de))) << ti << tj << " r " << r;
      }
}

TEST(ZblRepulsion, SwitchedToZeroWithTwoDerivativesAtOuterAndContinuousAtInner) {
  const models::ZblRepulsion zbl(kZbl, kTypes);
  for (int ti = 0; ti < 2; ++ti)
    for (int tj = 0; tj < 2; ++tj) {
      double e = 0, de = 0;
      zbl.evaluate(ti, tj, kZbl.outer, e, de);
      EXPECT_EQ(e, 0.0);
      EXPECT_EQ(de, 0.0);
      for (double eps : {1e-2, 1e-3}) {
        // V ~ eps^3 and V' ~ eps^2 just inside outer: V'' vanishes there too.
        zbl.evaluate(ti, tj, kZbl.outer - eps, e, de);
        double e_far = 0, de_far = 0;
        zbl.evaluate(ti, tj, kZbl.outer - 0.3, e_far, de_far);
        EXPECT_LT(std::abs(e), 50 * std::abs(e_far) * eps * eps * eps) << "eps " << eps;
        EXPECT_LT(std::abs(de), 50 * std::abs(de_far) * eps * eps) << "eps " << eps;
      }
      double below = 0, above = 0, d_below = 0, d_above = 0;
      zbl.evaluate(ti, tj, kZbl.inner - 1e-9, below, d_below);
      zbl.evaluate(ti, tj, kZbl.inner + 1e-9, above, d_above);
      // Across 2e-9 Å both change by what their slopes give (V'' ~ 1e3 eV/Å^2 here), no jump.
      EXPECT_NEAR(below, above, 1e-7 * std::abs(below));
      EXPECT_NEAR(d_below, d_above, 1e-7 * std::abs(d_below));
    }
  // Symmetric, and the nuclear charges order the pairs: O-O > O-H > H-H at one distance.
  double oo = 0, oh = 0, ho = 0, hh = 0, d = 0;
  zbl.evaluate(0, 0, 0.5, oo, d);
  zbl.evaluate(0, 1, 0.5, oh, d);
  zbl.evaluate(1, 0, 0.5, ho, d);
  zbl.evaluate(1, 1, 0.5, hh, d);
  EXPECT_EQ(oh, ho);
  EXPECT_GT(oo, oh);
  EXPECT_GT(oh, hh);
  EXPECT_GT(hh, 0.0);
}

TEST(ZblRepulsion, RefusesWhatItCannotEvaluate) {
  EXPECT_EQ(models::atomic_number("H"), 1);
  EXPECT_EQ(models::atomic_number("O"), 8);
  EXPECT_EQ(models::atomic_number("Og"), 118);
  EXPECT_EQ(models::atomic_number("Xx"), 0);
  const std::string not_element = test::error_of([] { models::ZblRepulsion({"zbl", 0.5, 1.0}, {"O", "Wat"}); });
  EXPECT_TRUE(test::contains(not_element, "\"Wat\"")) << not_element;
  const std::string radii = test::error_of([] { models::ZblRepulsion({"zbl", 1.0, 1.0}, {"O"}); });
  EXPECT_TRUE(test::contains(radii, "0 < inner < outer")) << radii;
}

/// Brute force over periodic images: energy, forces [n * 3], virial [9] of the pair repulsion.
struct PairSums {
  double energy = 0;
  std::vector<double> forces;
  std::vector<double> virial = std::vector<double>(9, 0.0);
};

PairSums brute_force(const models::ZblRepulsion& zbl, const Frame& f) {
  PairSums s;
  s.forces.assign(size_t(f.natoms()) * 3, 0.0);
  const int reach = 2;  // images: the cell's edge (>= 9 Å) is far beyond outer
  for (int i = 0; i < f.natoms(); ++i)
    for (int j = 0; j < f.natoms(); ++j)
      for (int a = -reach; a <= reach; ++a)
        for (int b = -reach; b <= reach; ++b)
          for (int c = -reach; c <= reach; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double d[3];
            for (int k = 0; k < 3; ++k)
              d[k] = f.pos[size_t(j * 3 + k)] - f.pos[size_t(i * 3 + k)] + a * f.cell[size_t(k)] +
                     b * f.cell[size_t(3 + k)] + c * f.cell[size_t(6 + k)];
            const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
            if (r >= zbl.outer()) continue;
            double v = 0, dv = 0;
            zbl.evaluate(f.types[size_t(i)], f.types[size_t(j)], r, v, dv);
            s.energy += 0.5 * v;  // each unordered pair is met twice
            for (int k = 0; k < 3; ++k) {
              const double g = 0.5 * dv * d[k] / r;
              s.forces[size_t(i * 3 + k)] += g;
              s.forces[size_t(j * 3 + k)] -= g;
              for (int m = 0; m < 3; ++m) s.virial[size_t(k * 3 + m)] -= d[k] * 0.5 * dv * d[m] / r;
            }
          }
  return s;
}

std::string with_repulsion(const std::string& yaml) {
  return yaml + "  pair_repulsion: {type: zbl, inner: 0.8, outer: 2.0}\n";
}

template <typename T>
struct RepulsionModelTest : ::testing::Test {
  static constexpr bool kFloat32 = std::is_same_v<T, float>;
  static std::string precision() { return kFloat32 ? "float32" : "float64"; }
  // Relative to the largest value compared; float32 rounds each atom's energy.
  static double tolerance() { return kFloat32 ? 2e-5 : 1e-11; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RepulsionModelTest, Reals);

TYPED_TEST(RepulsionModelTest, FrozenForwardIsItsTwinPlusThePairSum) {
  test::TempDir dir;
  const models::ZblRepulsion zbl(kZbl, kTypes);
  const Frame f = test::random_frame(40, true, 7, 9.5, {0.8, -0.6, 0.5}, 0.7, 0.35);
  const PairSums ref = brute_force(zbl, f);
  ASSERT_GT(ref.energy, 1.0) << "the frame must have pairs within the repulsion";
  for (const std::string& yaml :
       {test::se_yaml(TestFixture::precision()), test::equivariant_yaml(TestFixture::precision())}) {
    SCOPED_TRACE(yaml);
    const double r_max = test::write_frozen(dir / "twin.pt", yaml);
    test::write_frozen(dir / "with.pt", with_repulsion(yaml));
    archive::ExtraFiles extra;
    torch::jit::Module twin = archive::load_model(dir / "twin.pt", extra);
    torch::jit::Module with = archive::load_model(dir / "with.pt", extra);
    const auto dtype = TestFixture::kFloat32 ? torch::kFloat32 : torch::kFloat64;
    const test::ModelResult a = test::run_deploy(with, f, r_max, dtype);
    const test::ModelResult b = test::run_deploy(twin, f, r_max, dtype);
    const double tol = TestFixture::tolerance();
    EXPECT_NEAR(a.energy - b.energy, ref.energy, tol * (std::abs(a.energy) + ref.energy));
    const auto df = (a.forces - b.forces).contiguous();
    double fscale = 0;
    for (double x : ref.forces) fscale = std::max(fscale, std::abs(x));
    for (int64_t k = 0; k < f.natoms() * 3; ++k)
      ASSERT_NEAR(df.data_ptr<double>()[k], ref.forces[size_t(k)], tol * fscale) << "force component " << k;
    const auto dv = (a.virial - b.virial).contiguous();
    double vscale = 0;
    for (double x : ref.virial) vscale = std::max(vscale, std::abs(x));
    for (int k = 0; k < 9; ++k) EXPECT_NEAR(dv.data_ptr<double>()[k], ref.virial[size_t(k)], tol * vscale) << k;
    const std::string caps = extra["capabilities"];
    EXPECT_TRUE(test::contains(caps, "cpu+zbl")) << caps;
  }
}

TEST(RepulsionModel, ForcesAreTheForwardsNegativeGradient) {
  test::TempDir dir;
  // Pairs down to 0.3 Å: the repulsion dominates.
  const Frame f = test::random_frame(16, true, 11, 6.0, {0.3, -0.2, 0.1}, 0.3, 0.5);
  for (const std::string& yaml : {test::se_yaml("float64"), test::equivariant_yaml("float64")}) {
    SCOPED_TRACE(yaml);
    const double r_max = test::write_frozen(dir / "with.pt", with_repulsion(yaml));
    archive::ExtraFiles extra;
    torch::jit::Module model = archive::load_model(dir / "with.pt", extra);
    const test::ModelResult at = test::run_deploy(model, f, r_max, torch::kFloat64);
    const auto forces = at.forces.contiguous();
    for (int atom : {0, 5, 11})
      for (int k = 0; k < 3; ++k) {
        const double h = 1e-5;
        Frame plus = f, minus = f;
        plus.pos[size_t(atom * 3 + k)] += h;
        minus.pos[size_t(atom * 3 + k)] -= h;
        const double slope = (test::run_deploy(model, plus, r_max, torch::kFloat64).energy -
                              test::run_deploy(model, minus, r_max, torch::kFloat64).energy) /
                             (2 * h);
        const double force = forces.data_ptr<double>()[atom * 3 + k];
        EXPECT_NEAR(force, -slope, 1e-5 * std::max(1.0, std::abs(force))) << "atom " << atom << " direction " << k;
      }
  }
}

TYPED_TEST(RepulsionModelTest, OwnInferenceOnTwoRanksEqualsTheForward) {
  test::TempDir dir;
  for (const std::string& yaml :
       {test::se_yaml(TestFixture::precision()), test::equivariant_yaml(TestFixture::precision())}) {
    SCOPED_TRACE(yaml);
    const double r_max = test::write_frozen(dir / "with.pt", with_repulsion(yaml));
    EXPECT_TRUE(test::contains(md::Potential(dir / "with.pt", "cpu").describe(), "ZBL"));
    // Pairs from 0.9 Å: inside the switch (0.8-2.0 Å) the repulsion is tens of eV.
    for (auto evaluation : {md::Evaluation::kAuto, md::Evaluation::kTorchScript})
      test::check_against_forward(dir / "with.pt", r_max, evaluation, 10 * TestFixture::tolerance(), false);
  }
}

TEST(RepulsionLabels, TermsAreThePairSumAndForcesItsGradient) {
  const Frame f = test::random_frame(30, true, 5, 8.0, {0.4, 0.0, -0.3}, 0.6, 0.4);
  data::System system;
  system.name = "test";
  system.types = f.types;
  system.pbc = f.pbc;
  data::Frame frame;
  frame.coord = f.pos;
  frame.box = f.cell;
  const models::RepulsionLabels labels(kZbl, kTypes);
  const auto terms = labels.terms(system, frame);
  const PairSums ref = brute_force(models::ZblRepulsion(kZbl, kTypes), f);
  ASSERT_GT(ref.energy, 1.0);
  EXPECT_NEAR(terms.energy, ref.energy, 1e-11 * ref.energy);
  for (size_t k = 0; k < ref.forces.size(); ++k) EXPECT_NEAR(terms.forces[k], ref.forces[k], 1e-9) << k;
  for (size_t k = 0; k < 9; ++k) EXPECT_NEAR(terms.virial[k], ref.virial[k], 1e-9) << k;
  // Forces: the energy's negative gradient (finite differences, independent of the pair forces).
  for (int k : {0, 7, 44}) {
    const double h = 1e-6;
    data::Frame plus = frame, minus = frame;
    plus.coord[size_t(k)] += h;
    minus.coord[size_t(k)] -= h;
    const double slope = (labels.terms(system, plus).energy - labels.terms(system, minus).energy) / (2 * h);
    EXPECT_NEAR(terms.forces[size_t(k)], -slope, 1e-5 * std::max(1.0, std::abs(slope))) << k;
  }
  // subtract() takes them off the labels the frame has.
  frame.energy = {10.0};
  frame.force.assign(ref.forces.size(), 1.0);
  labels.subtract(system, frame);
  EXPECT_NEAR(frame.energy[0], 10.0 - terms.energy, 1e-12 * terms.energy);
  EXPECT_DOUBLE_EQ(frame.force[7], 1.0 - terms.forces[7]);
  EXPECT_TRUE(frame.virial.empty());
}

TEST(RepulsionInput, ReadAndRefused) {
  auto read = [](const std::string& extra) {
    return models::parse_model_settings("model:\n" + test::se_yaml("float64") + extra, "in.yaml");
  };
  const auto s = read("  pair_repulsion: {type: zbl, inner: 0.5, outer: 1.2}\n");
  EXPECT_EQ(s->pair_repulsion.type, "zbl");
  EXPECT_EQ(s->pair_repulsion.inner, 0.5);
  EXPECT_EQ(s->pair_repulsion.outer, 1.2);
  EXPECT_FALSE(read("")->pair_repulsion.enabled());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  pair_repulsion: zbl\n", "model.pair_repulsion: expected a mapping {type: zbl, inner: Å, outer: Å}"},
      {"  pair_repulsion: {type: lj, inner: 0.5, outer: 1.0}\n", "model.pair_repulsion.type"},
      {"  pair_repulsion: {type: zbl, outer: 1.0}\n", "model.pair_repulsion.inner: required key is missing"},
      {"  pair_repulsion: {type: zbl, inner: 1.0, outer: 0.5}\n",
       "model.pair_repulsion.outer: expected a radius larger than inner"},
      {"  pair_repulsion: {type: zbl, inner: 0.5, outer: 4.0}\n",
       "model.pair_repulsion.outer: expected at most the model's cutoff"},
      {"  pair_repulsion: {type: zbl, inner: -0.5, outer: 1.0}\n", "model.pair_repulsion.inner"},
      {"  pair_repulsion: {type: zbl, inner: 0.5, outer: 1.0, power: 2}\n", "power"},
  };
  for (const auto& [yaml, message] : cases) {
    const std::string error = test::error_of([&] { read(yaml); });
    EXPECT_TRUE(test::contains(error, message)) << yaml << " gave: " << error;
  }
  const std::string not_element = test::error_of([] {
    models::parse_model_settings(
        "model:\n  type_map: [Ow, H]\n  descriptor: {type: se_e2_a, sel: [4, 4], rcut: 3.0}\n"
        "  fitting_net: {neuron: [8]}\n  pair_repulsion: {type: zbl, inner: 0.5, outer: 1.0}\n",
        "in.yaml");
  });
  EXPECT_TRUE(test::contains(not_element, "model.pair_repulsion: needs element symbols in model.type_map"))
      << not_element;
}

}  // namespace
