// models::radial_message (the radial MLP and the message contraction fused for MD inference)
// against its definition: radial_mlp() then contract() (each tested against plain autograd in
// test_radial_mlp.cpp and test_message_contraction.cpp). Messages and the gradients by the basis,
// the features and the harmonics, float32 and float64, with more pairs than one block of the
// fused kernel (its MLP runs once a pair), a pair whose two edges are far apart, atoms without
// edges and 1 or 2 threads;
// a second derivative and trainable weights are refused.
#include "models/equivariant/radial_message.h"

#include <gtest/gtest.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <type_traits>

#include "models/equivariant/radial_mlp.h"
#include "test_util.h"

namespace {

using mlip::models::ContractionTables;

constexpr int64_t kAtoms = 23, kPairs = 170, kChannels = 6, kBessels = 5, kWidth = 7;
constexpr int64_t kH = 4, kD = 5, kS = 7, kP = 3, kTerms = 21;

/// Random pairs (i, j), i != j except a few self-images, each as its two edges (i -> j, j -> i)
/// except a few with one edge only (as a ghost centre's edge in MD), the edges sorted by centre;
/// atoms kAtoms - 2 and kAtoms - 1 have no edges.
ContractionTables random_tables(unsigned seed) {
  std::mt19937 rng(seed);
  struct Edge {
    int64_t i, j, pair;
  };
  std::vector<Edge> edges;
  for (int64_t q = 0; q < kPairs; ++q) {
    const int64_t i = int64_t(rng() % (kAtoms - 2));
    const int64_t j = q % 29 == 0 ? i : int64_t(rng() % (kAtoms - 2));
    edges.push_back({i, j, q});
    if (q % 13 != 5) edges.push_back({j, i, q});
  }
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.i < b.i; });
  std::vector<int64_t> centre, neighbor, pair, pair_edge(kPairs, -1);
  for (size_t e = 0; e < edges.size(); ++e) {
    centre.push_back(edges[e].i), neighbor.push_back(edges[e].j), pair.push_back(edges[e].pair);
    if (pair_edge[size_t(edges[e].pair)] < 0) pair_edge[size_t(edges[e].pair)] = int64_t(e);
  }
  std::vector<int64_t> path_of(kS), rows;
  for (auto& p : path_of) p = int64_t(rng() % kP);
  std::vector<double> values;
  std::normal_distribution<double> g(0, 1);
  for (int64_t t = 0; t < kTerms; ++t) {
    const int64_t s = int64_t(rng() % kS);
    rows.insert(rows.end(), {int64_t(rng() % kH), int64_t(rng() % kD), s, path_of[size_t(s)]});
    values.push_back(g(rng));
  }
  ContractionTables t;
  t.centre = torch::tensor(centre, torch::kInt64);
  t.neighbor = torch::tensor(neighbor, torch::kInt64);
  const auto counts = torch::bincount(t.centre, {}, kAtoms);
  t.centre_offsets = torch::cat({torch::zeros({1}, torch::kInt64), counts.cumsum(0)});
  ContractionTables::order_by_neighbor(t.neighbor, kAtoms, t.by_neighbor, t.neighbor_offsets);
  t.pair = torch::tensor(pair, torch::kInt64);
  t.pair_edge = torch::tensor(pair_edge, torch::kInt64);
  t.terms = torch::tensor(rows, torch::kInt64).reshape({-1, 4});
  t.coefficients = torch::tensor(values, torch::kFloat64);
  t.sizes = {kH, kD, kS, kP};
  return t;
}

struct Operands {
  torch::Tensor basis, x, y, output;
  std::vector<torch::Tensor> hidden;
  std::vector<double> divisors = {std::sqrt(double(kBessels)), std::sqrt(double(kWidth))};
  double output_divisor = std::sqrt(double(kWidth));
};

Operands random_operands(torch::Dtype dtype, unsigned seed, int64_t nedges) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto o = torch::TensorOptions().dtype(torch::kFloat64);
  Operands op;
  op.basis = at::randn({kPairs, kBessels}, gen, o).to(dtype);
  op.x = at::randn({kAtoms, kD, kChannels}, gen, o).to(dtype);
  op.y = at::randn({nedges, kH}, gen, o).to(dtype);
  op.hidden = {at::randn({kBessels, kWidth}, gen, o).to(dtype), at::randn({kWidth, kWidth}, gen, o).to(dtype)};
  op.output = at::randn({kWidth, kP * kChannels}, gen, o).to(dtype);
  return op;
}

/// max |a - b| / max |b|.
double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() /
         b.to(torch::kFloat64).abs().max().item<double>();
}

/// The messages and their gradients by basis, x and y at the incoming gradient `seed`.
std::vector<torch::Tensor> evaluate(const Operands& op, const ContractionTables& t, const torch::Tensor& seed,
                                    bool fused) {
  const torch::Tensor basis = op.basis.clone().requires_grad_(true), x = op.x.clone().requires_grad_(true),
                      y = op.y.clone().requires_grad_(true);
  torch::Tensor messages;
  if (fused) {
    messages = mlip::models::radial_message(basis, op.hidden, op.output, op.divisors, op.output_divisor, x, y, t);
  } else {
    const auto w = mlip::models::radial_mlp(basis, op.hidden, op.output, op.divisors, op.output_divisor);
    messages = mlip::models::contract(0, {torch::Tensor(), x, w.reshape({kPairs, kP, kChannels}), y}, t);
  }
  const auto grads = torch::autograd::grad({messages}, {basis, x, y}, {seed});
  return {messages.detach(), grads[0], grads[1], grads[2]};
}

template <typename T>
class RadialMessage : public ::testing::Test {
 protected:
  static constexpr bool kDouble = std::is_same_v<T, double>;
  torch::Dtype dtype() const { return kDouble ? torch::kFloat64 : torch::kFloat32; }
  double tolerance() const { return kDouble ? 1e-13 : 2e-5; }
};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RadialMessage, Dtypes);

TYPED_TEST(RadialMessage, EqualsTheMlpThenTheContractionAndTheirGradients) {
  const auto tables = random_tables(1);
  const int64_t nedges = tables.centre.size(0);
  ASSERT_GT(kPairs, 2 * 64) << "more pairs than two of the fused kernel's blocks";
  const auto op = random_operands(this->dtype(), 2, nedges);
  auto gen = at::detail::createCPUGenerator(3);
  const auto seed = at::randn({kAtoms, kS, kChannels}, gen, torch::TensorOptions().dtype(torch::kFloat64)).to(this->dtype());
  const auto reference = evaluate(op, tables, seed, false);
  const char* names[] = {"messages", "d/d basis", "d/d features", "d/d harmonics"};
  // The radial weights kept between the backward pass's two passes, or recomputed in the second.
  for (bool keep : {true, false}) {
    mlip::models::radial_message_keep_weights(keep);
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      const auto fused = evaluate(op, tables, seed, true);
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(fused[k].sizes(), reference[k].sizes()) << names[k];
        EXPECT_EQ(fused[k].scalar_type(), this->dtype()) << names[k];
        EXPECT_LT(relative(fused[k], reference[k]), this->tolerance())
            << names[k] << ", " << threads << " thread(s), weights " << (keep ? "kept" : "recomputed");
      }
      // Atoms without edges get no messages and no feature gradient.
      EXPECT_EQ(fused[0][kAtoms - 1].abs().max().template item<double>(), 0.0);
      EXPECT_EQ(fused[2][kAtoms - 1].abs().max().template item<double>(), 0.0);
    }
  }
  mlip::models::radial_message_keep_weights(std::nullopt);
  at::set_num_threads(1);
}

TYPED_TEST(RadialMessage, IsBitIdenticalForOneAndTwoThreads) {
  const auto tables = random_tables(5);
  const auto op = random_operands(this->dtype(), 6, tables.centre.size(0));
  const auto seed = torch::ones({kAtoms, kS, kChannels}, torch::TensorOptions().dtype(this->dtype()));
  for (bool keep : {true, false}) {
    mlip::models::radial_message_keep_weights(keep);
    at::set_num_threads(1);
    const auto one = evaluate(op, tables, seed, true);
    at::set_num_threads(2);
    const auto two = evaluate(op, tables, seed, true);
    at::set_num_threads(1);
    for (size_t k = 0; k < 4; ++k)
      EXPECT_TRUE(torch::equal(one[k], two[k])) << "output " << k << ", weights " << (keep ? "kept" : "recomputed");
  }
  mlip::models::radial_message_keep_weights(std::nullopt);
}

TEST(RadialMessageErrors, RefusesSecondDerivativesTrainableWeightsAndMissingPairs) {
  auto tables = random_tables(7);
  const auto op = random_operands(torch::kFloat64, 8, tables.centre.size(0));
  const torch::Tensor basis = op.basis.clone().requires_grad_(true);
  const auto messages =
      mlip::models::radial_message(basis, op.hidden, op.output, op.divisors, op.output_divisor, op.x, op.y, tables);
  EXPECT_TRUE(mlip::test::contains(
      mlip::test::error_of([&] { torch::autograd::grad({messages.sum()}, {basis}, {}, true, true); }),
      "first derivatives only"));
  const torch::Tensor trainable = op.output.clone().requires_grad_(true);
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] {
                                     mlip::models::radial_message(basis, op.hidden, trainable, op.divisors,
                                                                  op.output_divisor, op.x, op.y, tables);
                                   }),
                                   "must not require a gradient"));
  tables.pair = torch::Tensor();
  EXPECT_TRUE(mlip::test::contains(mlip::test::error_of([&] {
                                     mlip::models::radial_message(basis, op.hidden, op.output, op.divisors,
                                                                  op.output_divisor, op.x, op.y, tables);
                                   }),
                                   "need pair and pair_edge"));
}

}  // namespace
