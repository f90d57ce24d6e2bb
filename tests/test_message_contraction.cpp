// The message contraction of the equivariant training path (models/equivariant/message_contraction.h)
// against a naive reference: every partial, by both kernels, and its first and second
// derivatives through autograd, in float32 and float64.
#include "models/equivariant/message_contraction.h"

#include "error.h"

#include <gtest/gtest.h>

#include "train/operation_counter.h"
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <random>
#include <type_traits>

namespace {

using mlip::models::contract;
using mlip::models::contract_kernel;
using mlip::models::ContractionKernel;
using mlip::models::ContractionTables;

constexpr int64_t kAtoms = 7, kEdges = 40, kChannels = 5;
constexpr int64_t kH = 4, kD = 5, kS = 7, kP = 3, kTerms = 18;

/// Random edges (centres non-decreasing, some atoms without edges), terms and coefficients.
ContractionTables random_tables(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> centre(kEdges), neighbor(kEdges);
  for (auto& c : centre) c = int64_t(rng() % (kAtoms - 1));  // atom kAtoms-1 is never a centre
  std::sort(centre.begin(), centre.end());
  for (auto& j : neighbor) j = int64_t(rng() % kAtoms);
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
  t.terms = torch::tensor(rows, torch::kInt64).reshape({-1, 4});
  t.coefficients = torch::tensor(values, torch::kFloat64);
  t.sizes = {kH, kD, kS, kP};
  return t;
}

/// F(A, X, W, Y) term by term, edge by edge (docs/equivariant.md "The training path").
torch::Tensor naive_f(const std::vector<torch::Tensor>& op, const ContractionTables& t) {
  const auto& A = op[0];
  const auto& X = op[1];
  const auto& W = op[2];
  const auto& Y = op[3];
  auto f = torch::zeros({}, A.options());
  for (int64_t e = 0; e < kEdges; ++e) {
    const int64_t i = t.centre[e].item<int64_t>(), j = t.neighbor[e].item<int64_t>();
    for (int64_t q = 0; q < kTerms; ++q) {
      const auto r = t.terms[q];
      const int64_t m = r[0].item<int64_t>(), d = r[1].item<int64_t>(), s = r[2].item<int64_t>(),
                    p = r[3].item<int64_t>();
      f = f + t.coefficients[q].item<double>() * (A[i][s] * X[j][d] * W[e][p]).sum() * Y[e][m];
    }
  }
  return f;
}

std::vector<torch::Tensor> random_operands(torch::Dtype dtype, unsigned seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto o = torch::TensorOptions().dtype(torch::kFloat64);
  return {at::randn({kAtoms, kS, kChannels}, gen, o).to(dtype), at::randn({kAtoms, kD, kChannels}, gen, o).to(dtype),
          at::randn({kEdges, kP, kChannels}, gen, o).to(dtype), at::randn({kEdges, kH}, gen, o).to(dtype)};
}

/// max |a - b| / max |b|.
double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() /
         b.to(torch::kFloat64).abs().max().item<double>();
}

template <typename T>
class MessageContraction : public ::testing::Test {
 protected:
  static constexpr bool kDouble = std::is_same_v<T, double>;
  torch::Dtype dtype() const { return kDouble ? torch::kFloat64 : torch::kFloat32; }
  double tolerance() const { return kDouble ? 1e-12 : 2e-5; }
};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MessageContraction, Dtypes);

// Each partial dF/d(slot), by the CPU kernel and by the LibTorch-operations kernel, equals
// autograd's gradient of the naive F.
TYPED_TEST(MessageContraction, EveryPartialByBothKernelsEqualsTheNaiveGradient) {
  const auto tables = random_tables(1);
  auto op = random_operands(torch::kFloat64, 2);
  for (auto& x : op) x.requires_grad_(true);
  const auto grads = torch::autograd::grad({naive_f(op, tables)}, op);
  std::vector<torch::Tensor> low;
  for (const auto& x : op) low.push_back(x.detach().to(this->dtype()));
  for (int64_t slot = 0; slot < 4; ++slot)
    for (auto kernel : {ContractionKernel::kAuto, ContractionKernel::kGeneric}) {
      const auto out = contract_kernel(slot, low, tables, kernel);
      EXPECT_EQ(out.sizes(), grads[size_t(slot)].sizes()) << "slot " << slot;
      EXPECT_EQ(out.scalar_type(), this->dtype());
      EXPECT_LT(relative(out, grads[size_t(slot)]), this->tolerance())
          << "slot " << slot << (kernel == ContractionKernel::kGeneric ? " (generic kernel)" : " (CPU kernel)");
    }
}

// The training use: M = dF/dA, E = <R, M>, the first derivatives of E by X, W, Y with a graph,
// a loss of those, and its gradients by R, X and W (second derivatives of the contraction)
// through the custom autograd against autograd through the naive F. 1e-10 in float64.
TYPED_TEST(MessageContraction, SecondDerivativesEqualAutogradOfTheNaiveReference) {
  const auto tables = random_tables(3);
  const auto base = random_operands(this->dtype(), 4);
  const auto u = random_operands(this->dtype(), 6);  // loss weights of the first derivatives
  auto loss_grads = [&](bool naive) {
    std::vector<torch::Tensor> op;
    for (const auto& x : base) op.push_back(x.clone().requires_grad_(true));
    // E = <R, M(X, W, Y)> = F(R, X, W, Y): the naive F itself, or R times the contraction.
    const auto energy =
        naive ? naive_f(op, tables) : (op[0] * contract(0, {torch::Tensor(), op[1], op[2], op[3]}, tables)).sum();
    const auto first = torch::autograd::grad({energy}, {op[1], op[2], op[3]}, {}, true, true);
    const auto loss = (first[0] * u[1]).sum() + (first[1] * u[2]).sum() + (first[2] * u[3]).sum() +
                      first[2].sum().pow(2) + first[0].pow(2).sum();
    return torch::autograd::grad({loss}, {op[0], op[1], op[2]});
  };
  const auto reference = loss_grads(true);
  const auto fast = loss_grads(false);
  const double tol = TestFixture::kDouble ? 1e-10 : 1e-4;
  for (size_t k = 0; k < 3; ++k) EXPECT_LT(relative(fast[k], reference[k]), tol) << "d loss / d operand " << k;
}

// The CPU kernel is deterministic: bit-identical results for 1 and 2 threads.
TYPED_TEST(MessageContraction, CpuKernelIsBitIdenticalForAnyThreadCount) {
  const auto tables = random_tables(7);
  const auto op = random_operands(this->dtype(), 8);
  const int threads = at::get_num_threads();
  for (int64_t slot = 0; slot < 4; ++slot) {
    at::set_num_threads(1);
    const auto one = contract_kernel(slot, op, tables, ContractionKernel::kAuto);
    at::set_num_threads(2);
    const auto two = contract_kernel(slot, op, tables, ContractionKernel::kAuto);
    EXPECT_TRUE(torch::equal(one, two)) << "slot " << slot;
  }
  at::set_num_threads(threads);
}

// Radial weights by pair (MD inference, docs/equivariant.md "Inference in MD"): with W held per
// pair and read through pair[e], every partial by both kernels equals the per-edge contraction
// with W gathered to the edges, the partial by W being the per-edge one summed over each pair's
// edges; and the first derivatives through autograd agree.
TYPED_TEST(MessageContraction, RadialWeightsByPairEqualTheWeightsGatheredToTheEdges) {
  const auto per_edge_tables = random_tables(11);
  constexpr int64_t kPairs = 23;
  std::mt19937 rng(12);
  std::vector<int64_t> pair(kEdges), first(kPairs, -1);
  for (int64_t e = 0; e < kEdges; ++e) pair[size_t(e)] = e < kPairs ? e : int64_t(rng() % kPairs);
  std::shuffle(pair.begin(), pair.end(), rng);
  for (int64_t e = 0; e < kEdges; ++e)
    if (first[size_t(pair[size_t(e)])] < 0) first[size_t(pair[size_t(e)])] = e;
  ContractionTables by_pair = per_edge_tables;
  by_pair.pair = torch::tensor(pair, torch::kInt64);
  by_pair.pair_edge = torch::tensor(first, torch::kInt64);
  auto op = random_operands(this->dtype(), 13);
  op[2] = op[2].narrow(0, 0, kPairs).contiguous();  // W [Q, P, f]
  std::vector<torch::Tensor> gathered = op;
  gathered[2] = op[2].index_select(0, by_pair.pair);
  for (int64_t slot = 0; slot < 4; ++slot)
    for (auto kernel : {ContractionKernel::kAuto, ContractionKernel::kGeneric}) {
      const auto out = contract_kernel(slot, op, by_pair, kernel);
      auto expected = contract_kernel(slot, gathered, per_edge_tables, kernel);
      if (slot == 2) expected = torch::zeros_like(op[2]).index_add(0, by_pair.pair, expected);
      EXPECT_EQ(out.sizes(), expected.sizes()) << "slot " << slot;
      EXPECT_LT(relative(out, expected), this->tolerance())
          << "slot " << slot << (kernel == ContractionKernel::kGeneric ? " (generic kernel)" : " (CPU kernel)");
    }
  // E = <R, M(X, W, Y)>: its gradients by X, W (per pair) and Y through the custom autograd.
  auto gradients = [&](bool pairs) {
    std::vector<torch::Tensor> leaves;
    for (const auto& x : op) leaves.push_back(x.clone().requires_grad_(true));
    const torch::Tensor w = pairs ? leaves[2] : leaves[2].index_select(0, by_pair.pair);
    const auto m = contract(0, {torch::Tensor(), leaves[1], w, leaves[3]}, pairs ? by_pair : per_edge_tables);
    return torch::autograd::grad({(m * leaves[0]).sum()}, {leaves[1], leaves[2], leaves[3]});
  };
  const auto a = gradients(true), b = gradients(false);
  for (size_t k = 0; k < 3; ++k) EXPECT_LT(relative(a[k], b[k]), this->tolerance()) << "d E / d operand " << k + 1;
}

// A pair table naming a pair beyond the radial weights' rows is refused with the edge and the
// value, not read out of bounds.
// A GPU's kernel makes a table's dense coupling once per dtype and device: the second call of
// a slot makes fewer operator calls than the first (the coupling's dozen are gone), and the
// same numbers; another table (other tensors) makes its own.
TEST(MessageContraction, TheGenericKernelMakesATablesDenseCouplingOnce) {
  const auto tables = random_tables(7);
  const auto op = random_operands(torch::kFloat64, 3);
  auto calls = [&](const ContractionTables& t, torch::Tensor& out) {
    mlip::train::OperationCounter counter;
    out = contract_kernel(0, op, t, ContractionKernel::kGeneric);
    return counter.counts().operators;
  };
  torch::Tensor first, second, other;
  const int64_t first_calls = calls(tables, first), second_calls = calls(tables, second);
  EXPECT_LE(second_calls + 8, first_calls);
  EXPECT_TRUE(torch::equal(first, second));
  ContractionTables copy = tables;
  copy.terms = tables.terms.clone();
  copy.coefficients = tables.coefficients.clone();
  EXPECT_EQ(calls(copy, other), first_calls);
  EXPECT_TRUE(torch::equal(first, other));
}

TEST(MessageContraction, APairOutOfRangeIsAnError) {
  ContractionTables t = random_tables(11);
  std::vector<int64_t> pair(kEdges);
  for (int64_t e = 0; e < kEdges; ++e) pair[size_t(e)] = e % 5;
  pair[7] = 5;  // W below has 5 rows
  t.pair = torch::tensor(pair, torch::kInt64);
  t.pair_edge = torch::arange(5, torch::kInt64);
  auto op = random_operands(torch::kFloat64, 13);
  op[2] = op[2].narrow(0, 0, 5).contiguous();
  try {
    contract_kernel(2, op, t, ContractionKernel::kAuto);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "message contraction: pair[7] = 5, expected a pair from 0 to 4");
  }
}

}  // namespace
