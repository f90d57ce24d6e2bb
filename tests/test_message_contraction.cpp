// The message contraction of the equivariant training path (models/equivariant/message_contraction.h)
// against a naive reference: every partial, by both kernels, and its first and second
// derivatives through autograd, in float32 and float64.
#include "models/equivariant/message_contraction.h"

#include "error.h"
#include "gpu_code_on_the_cpu.h"
#include "models/kernels/device_kernels.h"

#include <gtest/gtest.h>

#include "train/operation_counter.h"
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <random>
#include <string>
#include <type_traits>

namespace {

using mlip::models::contract;
using mlip::models::contract_kernel;
using mlip::models::ContractionKernel;
using mlip::models::ContractionTables;
using mlip::test::GpuCodeOnTheCpu;

constexpr int64_t kAtoms = 7, kEdges = 40, kChannels = 5;
constexpr int64_t kH = 4, kD = 5, kS = 7, kP = 3, kTerms = 18;

/// The sizes of a random contraction: atoms N, edges E, channels f, harmonics H, input and
/// output components D and S, paths P, coupling terms.
struct Shape {
  int64_t atoms = kAtoms, edges = kEdges, channels = kChannels;
  int64_t H = kH, D = kD, S = kS, P = kP, terms = kTerms;
};

/// Random edges (centres non-decreasing, some atoms without edges), terms and coefficients.
ContractionTables random_tables(unsigned seed, const Shape& z = Shape{}) {
  std::mt19937 rng(seed);
  std::vector<int64_t> centre(size_t(z.edges)), neighbor(size_t(z.edges));
  for (auto& c : centre) c = int64_t(rng() % (z.atoms - 1));  // the last atom is never a centre
  std::sort(centre.begin(), centre.end());
  for (auto& j : neighbor) j = int64_t(rng() % z.atoms);
  std::vector<int64_t> path_of(size_t(z.S)), rows;
  for (auto& p : path_of) p = int64_t(rng() % z.P);
  std::vector<double> values;
  std::normal_distribution<double> g(0, 1);
  for (int64_t t = 0; t < z.terms; ++t) {
    const int64_t s = int64_t(rng() % z.S);
    rows.insert(rows.end(), {int64_t(rng() % z.H), int64_t(rng() % z.D), s, path_of[size_t(s)]});
    values.push_back(g(rng));
  }
  ContractionTables t;
  t.centre = torch::tensor(centre, torch::kInt64);
  t.neighbor = torch::tensor(neighbor, torch::kInt64);
  const auto counts = torch::bincount(t.centre, {}, z.atoms);
  t.centre_offsets = torch::cat({torch::zeros({1}, torch::kInt64), counts.cumsum(0)});
  ContractionTables::order_by_neighbor(t.neighbor, z.atoms, t.by_neighbor, t.neighbor_offsets);
  t.terms = torch::tensor(rows, torch::kInt64).reshape({-1, 4});
  t.coefficients = torch::tensor(values, torch::kFloat64);
  t.sizes = {z.H, z.D, z.S, z.P};
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

std::vector<torch::Tensor> random_operands(torch::Dtype dtype, unsigned seed, const Shape& z = Shape{}) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto o = torch::TensorOptions().dtype(torch::kFloat64);
  return {at::randn({z.atoms, z.S, z.channels}, gen, o).to(dtype),
          at::randn({z.atoms, z.D, z.channels}, gen, o).to(dtype),
          at::randn({z.edges, z.P, z.channels}, gen, o).to(dtype), at::randn({z.edges, z.H}, gen, o).to(dtype)};
}

/// The CPU kernel, LibTorch's operations and the CUDA kernels' host twin.
const std::vector<ContractionKernel> kKernels = {ContractionKernel::kAuto, ContractionKernel::kGeneric,
                                                 ContractionKernel::kDevice};

std::string name(ContractionKernel kernel) {
  return kernel == ContractionKernel::kGeneric ? " (generic kernel)"
         : kernel == ContractionKernel::kDevice ? " (device kernels' twin)"
                                                : " (CPU kernel)";
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
    for (auto kernel : kKernels) {
      const auto out = contract_kernel(slot, low, tables, kernel);
      EXPECT_EQ(out.sizes(), grads[size_t(slot)].sizes()) << "slot " << slot;
      EXPECT_EQ(out.scalar_type(), this->dtype());
      EXPECT_LT(relative(out, grads[size_t(slot)]), this->tolerance()) << "slot " << slot << name(kernel);
    }
}

// The training use: M = dF/dA, E = <R, M>, the first derivatives of E by X, W, Y with a graph,
// a loss of those, and its gradients by R, X and W (second derivatives of the contraction)
// through the custom autograd against autograd through the naive F. 1e-10 in float64. Then
// again with every partial by the CUDA kernels' host twin.
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
  const double tol = TestFixture::kDouble ? 1e-10 : 1e-4;
  const auto fast = loss_grads(false);
  for (size_t k = 0; k < 3; ++k) EXPECT_LT(relative(fast[k], reference[k]), tol) << "d loss / d operand " << k;
  GpuCodeOnTheCpu gpu_code(true);  // every partial by the CUDA kernels' twin
  const auto twin = loss_grads(false);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_LT(relative(twin[k], reference[k]), tol) << "d loss / d operand " << k << " (device kernels' twin)";
}

// The CPU kernel is deterministic: bit-identical results for 1 and 2 threads.
// (So is the CUDA kernels' twin, as the CUDA kernels are: each element summed by one thread.)
TYPED_TEST(MessageContraction, CpuKernelIsBitIdenticalForAnyThreadCount) {
  const auto tables = random_tables(7);
  const auto op = random_operands(this->dtype(), 8);
  const int threads = at::get_num_threads();
  for (int64_t slot = 0; slot < 4; ++slot)
    for (auto kernel : {ContractionKernel::kAuto, ContractionKernel::kDevice}) {
      at::set_num_threads(1);
      const auto one = contract_kernel(slot, op, tables, kernel);
      at::set_num_threads(2);
      const auto two = contract_kernel(slot, op, tables, kernel);
      EXPECT_TRUE(torch::equal(one, two)) << "slot " << slot << name(kernel);
    }
  at::set_num_threads(threads);
}

// The twin's harmonics sum the channels in 32 lanes: with more channels than lanes (two full
// rounds and a part), every slot still equals the CPU kernel.
TYPED_TEST(MessageContraction, TheDeviceKernelsLanesCoverEveryChannel) {
  Shape z;
  z.channels = 70;
  const auto tables = random_tables(21, z);
  const auto op = random_operands(this->dtype(), 22, z);
  for (int64_t slot = 0; slot < 4; ++slot)
    EXPECT_LT(relative(contract_kernel(slot, op, tables, ContractionKernel::kDevice),
                       contract_kernel(slot, op, tables, ContractionKernel::kAuto)),
              this->tolerance())
        << "slot " << slot;
}

// kAuto takes the CPU kernel while the host kernels are on; without them, the device kernels'
// twin when those are on and LibTorch's operations when not (the same bits as asking for each).
TEST(MessageContraction, TheSwitchesChooseTheKernel) {
  const auto tables = random_tables(9);
  const auto op = random_operands(torch::kFloat64, 10);
  int64_t differing = 0;  // slots whose generic and twin results differ in some bit
  for (int64_t slot = 0; slot < 4; ++slot) {
    differing += !torch::equal(contract_kernel(slot, op, tables, ContractionKernel::kGeneric),
                               contract_kernel(slot, op, tables, ContractionKernel::kDevice));
    for (const bool device : {false, true}) {
      GpuCodeOnTheCpu gpu_code(device);
      const auto chosen = contract_kernel(slot, op, tables, ContractionKernel::kAuto);
      const auto expected =
          contract_kernel(slot, op, tables, device ? ContractionKernel::kDevice : ContractionKernel::kGeneric);
      EXPECT_TRUE(torch::equal(chosen, expected)) << "slot " << slot << (device ? ", device kernels" : "");
    }
  }
  EXPECT_GT(differing, 0) << "the kernels' sums differ in their order, so the bits tell which one ran";
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
    for (auto kernel : kKernels) {
      const auto out = contract_kernel(slot, op, by_pair, kernel);
      auto expected = contract_kernel(slot, gathered, per_edge_tables, kernel);
      if (slot == 2) expected = torch::zeros_like(op[2]).index_add(0, by_pair.pair, expected);
      EXPECT_EQ(out.sizes(), expected.sizes()) << "slot " << slot;
      EXPECT_LT(relative(out, expected), this->tolerance()) << "slot " << slot << name(kernel);
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

// On a CUDA device (label gpu): the CUDA kernels against their host twin, every slot, per edge
// and by pair, on a contraction of a water batch's size (400 atoms, 12,007 edges, 64 channels:
// counts no block divides); then a first derivative through autograd against the CPU kernel.
TYPED_TEST(MessageContraction, CudaKernelsEqualTheirHostTwin) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  if (!mlip::models::cuda_kernels_compiled()) GTEST_SKIP() << "this build has no CUDA kernels (MLIP_CUDA_KERNELS=OFF)";
  Shape z;
  z.atoms = 400, z.edges = 12007, z.channels = 64, z.H = 16, z.D = 16, z.S = 16, z.P = 4, z.terms = 300;
  const auto tables = random_tables(41, z);
  const auto op = random_operands(this->dtype(), 42, z);
  std::vector<torch::Tensor> on_gpu;
  for (const auto& x : op) on_gpu.push_back(x.to(torch::kCUDA));
  ContractionTables by_pair = tables;
  const int64_t pairs = z.edges / 2 + 1;
  by_pair.pair = torch::arange(z.edges, torch::kInt64).remainder(pairs);
  by_pair.pair_edge = torch::arange(pairs, torch::kInt64);
  std::vector<torch::Tensor> op_by_pair = op, on_gpu_by_pair = on_gpu;
  op_by_pair[2] = op[2].narrow(0, 0, pairs).contiguous();
  on_gpu_by_pair[2] = op_by_pair[2].to(torch::kCUDA);
  for (int64_t slot = 0; slot < 4; ++slot) {
    const auto device = contract_kernel(slot, on_gpu, tables, ContractionKernel::kDevice);
    EXPECT_TRUE(device.is_cuda());
    EXPECT_LT(relative(device.cpu(), contract_kernel(slot, op, tables, ContractionKernel::kDevice)), this->tolerance())
        << "slot " << slot;
    const auto paired = contract_kernel(slot, on_gpu_by_pair, by_pair, ContractionKernel::kDevice);
    EXPECT_LT(relative(paired.cpu(), contract_kernel(slot, op_by_pair, by_pair, ContractionKernel::kDevice)),
              this->tolerance())
        << "slot " << slot << ", radial weights by pair";
  }
  // E = <R, M(X, W, Y)>: dE/dX, dE/dW, dE/dY by autograd, the CUDA kernels against the CPU's.
  auto gradients = [&](const std::vector<torch::Tensor>& operands) {
    std::vector<torch::Tensor> leaves;
    for (const auto& x : operands) leaves.push_back(x.clone().requires_grad_(true));
    const auto m = contract(0, {torch::Tensor(), leaves[1], leaves[2], leaves[3]}, tables);
    return torch::autograd::grad({(m * leaves[0]).sum()}, {leaves[1], leaves[2], leaves[3]});
  };
  const auto cpu = gradients(op);
  mlip::models::set_device_kernels(true);
  const auto cuda = gradients(on_gpu);
  mlip::models::set_device_kernels(false);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_LT(relative(cuda[k].cpu(), cpu[k]), this->tolerance()) << "d E / d operand " << k + 1;
}

}  // namespace
