// The product-basis contraction of the equivariant training path (models/equivariant/product_basis.h)
// against a naive reference: every partial by both kernels, first and second derivatives
// through autograd with the three message slots fed the same tensor (as the model does), in
// float32 and float64, and the CPU kernel's determinism.
#include "models/equivariant/product_basis.h"

#include <gtest/gtest.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <random>
#include <type_traits>

#include "gpu_code_on_the_cpu.h"
#include "models/kernels/device_kernels.h"
#include "test_util.h"

namespace {

using mlip::models::product_contract;
using mlip::models::product_contract_kernel;
using mlip::models::ProductCoupling;
using mlip::models::ProductKernel;

constexpr int64_t kNodes = 6, kChannels = 5, kTerms = 40;

/// The rows of each slot: M, Q, K1, K2, K3 (the factors of different widths, as P and A are).
const std::vector<int64_t> kRows = {3, 4, 7, 9, 7};

/// Random terms of `factors` factors (absent factors -1), weighted (q >= 0) or not.
ProductCoupling random_coupling(unsigned seed, int64_t factors, bool weighted = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<int64_t> rows;
  std::vector<double> values;
  for (int64_t t = 0; t < kTerms; ++t) {
    std::vector<int64_t> r(5, -1);
    r[0] = int64_t(rng() % kRows[0]);
    if (weighted) r[1] = int64_t(rng() % kRows[1]);
    for (int64_t s = 2; s < 2 + factors; ++s) r[size_t(s)] = int64_t(rng() % kRows[size_t(s)]);
    rows.insert(rows.end(), r.begin(), r.end());
    values.push_back(g(rng));
  }
  return {torch::tensor(rows, torch::kInt64).reshape({-1, 5}), torch::tensor(values, torch::kFloat64), kRows};
}

/// F(G, W, A1, A2, A3) term by term (absent factors are left out).
torch::Tensor naive_f(const std::vector<torch::Tensor>& op, const ProductCoupling& c) {
  auto f = torch::zeros({}, op[0].options());
  for (int64_t t = 0; t < c.terms.size(0); ++t) {
    const auto r = c.terms[t];
    auto prod = c.coefficients[t].item<double>() * op[0].select(1, r[0].item<int64_t>());
    for (int64_t s = 1; s < 5; ++s) {
      const int64_t row = r[s].item<int64_t>();
      if (row >= 0) prod = prod * op[size_t(s)].select(1, row);
    }
    f = f + prod.sum();
  }
  return f;
}

std::vector<torch::Tensor> random_operands(torch::Dtype dtype, unsigned seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto o = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<torch::Tensor> op;
  for (int64_t rows : kRows) op.push_back(at::randn({kNodes, rows, kChannels}, gen, o).to(dtype));
  return op;
}

/// The operands a coupling uses (the others undefined).
std::vector<torch::Tensor> used(std::vector<torch::Tensor> op, int64_t factors, bool weighted) {
  if (!weighted) op[1] = torch::Tensor();
  for (int64_t s = 2 + factors; s < 5; ++s) op[size_t(s)] = torch::Tensor();
  return op;
}

/// The CPU kernel, LibTorch's operations and the CUDA kernel's host twin.
const std::vector<ProductKernel> kKernels = {ProductKernel::kAuto, ProductKernel::kGeneric, ProductKernel::kDevice};

std::string name(ProductKernel kernel) {
  return kernel == ProductKernel::kGeneric  ? " (generic kernel)"
         : kernel == ProductKernel::kDevice ? " (device kernel's twin)"
                                            : " (CPU kernel)";
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() /
         b.to(torch::kFloat64).abs().max().item<double>();
}

template <typename T>
class ProductBasis : public ::testing::Test {
 protected:
  static constexpr bool kDouble = std::is_same_v<T, double>;
  torch::Dtype dtype() const { return kDouble ? torch::kFloat64 : torch::kFloat32; }
  double tolerance() const { return kDouble ? 1e-12 : 2e-5; }
};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ProductBasis, Dtypes);

// Each partial dF/d(slot), by the CPU kernel and by the LibTorch-operations kernel, equals
// autograd's gradient of the naive F, for products of one, two and three factors of different
// widths, weighted or not.
TYPED_TEST(ProductBasis, EveryPartialByBothKernelsEqualsTheNaiveGradient) {
  for (bool weighted : {true, false})
    for (int64_t factors = 1; factors <= 3; ++factors) {
      SCOPED_TRACE(std::to_string(factors) + " factors" + (weighted ? ", weighted" : ""));
      const auto coupling = random_coupling(1, factors, weighted);
      auto op = random_operands(torch::kFloat64, 2);
      for (auto& x : op) x.requires_grad_(true);
      const auto grads = torch::autograd::grad({naive_f(op, coupling)}, op, {}, false, false, true);
      std::vector<torch::Tensor> low;
      for (const auto& x : used(op, factors, weighted)) low.push_back(x.defined() ? x.detach().to(this->dtype()) : x);
      for (int64_t slot = 0; slot < 2 + factors; ++slot) {
        if (slot == 1 && !weighted) continue;
        for (auto kernel : kKernels) {
          const auto out = product_contract_kernel(slot, low, coupling, kernel);
          EXPECT_EQ(out.sizes(), grads[size_t(slot)].sizes()) << "slot " << slot;
          EXPECT_EQ(out.scalar_type(), this->dtype());
          EXPECT_LT(relative(out, grads[size_t(slot)]), this->tolerance()) << "slot " << slot << name(kernel);
        }
      }
      // A slot the products do not have is an error, not zeros.
      if (factors < 3) {
        EXPECT_THROW(product_contract_kernel(4, low, coupling, ProductKernel::kAuto), std::exception);
      }
      if (!weighted) {
        EXPECT_THROW(product_contract_kernel(1, low, coupling, ProductKernel::kAuto), std::exception);
      }
    }
}

// The training use, staged as the model is: P = dF_P/dG at (a, a) (unweighted pairs), then
// B = dF_B/dG at (W, P, a) (three factors); E = <R, B>; the first derivatives of E by a and W with
// a graph (the forces' ingredients), a loss of them, and its gradients by R, W and a (second
// derivatives) through the custom autograd, against autograd through the naive F's with the
// same tensors. Also for products of one factor (B from a) and two (B from P).
/// The pair products' coupling of the staged tests: P's rows are K1 of the products below, from
/// a's rows (K3) twice.
ProductCoupling pair_coupling() {
  ProductCoupling pairs = random_coupling(5, 2, false);
  auto t = pairs.terms.clone();
  std::mt19937 rng(6);
  for (int64_t r = 0; r < t.size(0); ++r) {
    t[r][0] = int64_t(rng() % kRows[2]);
    t[r][2] = int64_t(rng() % kRows[4]);
    t[r][3] = int64_t(rng() % kRows[4]);
  }
  pairs.terms = t;
  pairs.sizes = {kRows[2], 0, kRows[4], kRows[4], 0};
  return pairs;
}

/// The products of the staged tests: of one factor (from a), two (from P) or three (P and a).
ProductCoupling staged_coupling(int64_t factors, unsigned seed = 3) {
  ProductCoupling coupling = random_coupling(seed, factors);
  auto t = coupling.terms.clone();
  if (factors == 1) {  // from a directly: its rows are K3's (a's)
    for (int64_t r = 0; r < t.size(0); ++r) t[r][2] = t[r][2].item<int64_t>() % kRows[4];
    coupling.sizes = {kRows[0], kRows[1], kRows[4], 0, 0};
  } else if (factors == 2) {  // from P alone: one operand
    for (int64_t r = 0; r < t.size(0); ++r) t[r][3] = -1;
    coupling.sizes = {kRows[0], kRows[1], kRows[2], 0, 0};
  } else {  // (P, a): the second factor has a's rows
    for (int64_t r = 0; r < t.size(0); ++r) {
      t[r][3] = t[r][3].item<int64_t>() % kRows[4];
      t[r][4] = -1;
    }
    coupling.sizes = {kRows[0], kRows[1], kRows[2], kRows[4], 0};
  }
  coupling.terms = t;
  return coupling;
}

TYPED_TEST(ProductBasis, SecondDerivativesEqualAutogradOfTheNaiveReference) {
  const ProductCoupling pairs = pair_coupling();
  for (int64_t factors = 1; factors <= 3; ++factors) {
    SCOPED_TRACE(std::to_string(factors) + " factors");
    const ProductCoupling coupling = staged_coupling(factors);
    const auto base = random_operands(this->dtype(), 4);
    const auto u = random_operands(this->dtype(), 6);  // loss weights of the first derivatives
    auto loss_grads = [&](bool naive) {
      auto r = base[0].clone().requires_grad_(true);
      auto w = base[1].clone().requires_grad_(true);
      auto a = base[4].clone().requires_grad_(true);  // [N, K, f]
      const torch::Tensor none;
      torch::Tensor p;
      if (naive) {
        auto g = torch::zeros({kNodes, kRows[2], kChannels}, a.options()).requires_grad_(true);
        p = torch::autograd::grad({naive_f({g, none, a, a, none}, pairs)}, {g}, {}, true, true)[0];
      } else {
        p = product_contract(0, {none, none, a, a, none}, pairs);
      }
      std::vector<torch::Tensor> op = {r, w, factors == 1 ? a : p, factors == 3 ? a : none, none};
      torch::Tensor energy;
      if (naive) {
        energy = naive_f(op, coupling);
      } else {
        op[0] = none;
        energy = (r * product_contract(0, op, coupling)).sum();
      }
      const auto first = torch::autograd::grad({energy}, {w, a}, {}, true, true);
      const auto loss = (first[0] * u[1]).sum() + (first[1] * u[4]).sum() + first[1].pow(2).sum();
      auto g = torch::autograd::grad({loss}, {r, w, a}, {}, false, false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k)
        if (!g[k].defined()) g[k] = torch::zeros_like(k == 2 ? base[4] : base[k]);
      return g;
    };
    const auto reference = loss_grads(true);
    const double tol = TestFixture::kDouble ? 1e-10 : 1e-4;
    const char* names[] = {"R", "W", "a"};
    for (const bool twin : {false, true}) {
      SCOPED_TRACE(twin ? "the CUDA kernel's twin" : "the CPU kernel");
      const auto fast = mlip::test::run_with_device_twins(twin, [&] { return loss_grads(false); });
      for (size_t k = 0; k < 3; ++k) {
        if (reference[k].abs().max().template item<double>() == 0) {
          EXPECT_EQ(fast[k].abs().max().template item<double>(), 0) << "d loss / d " << names[k];
          continue;
        }
        EXPECT_LT(relative(fast[k], reference[k]), tol) << "d loss / d " << names[k];
      }
    }
    // The comparison can fail: the second derivatives do not vanish.
    EXPECT_GT(reference[factors > 1 ? 2 : 0].abs().max().template item<double>(), 1e-3);
  }
}

// A target's products of one, two and three factors as one product sum (operands G 0, W 1, a 2,
// P 3) equal the three products summed, to second order as in the model's training step: the
// energy <R, B>, its first derivatives by W and a with a graph, a loss of them, and the loss's
// gradients by R, W and a.
TYPED_TEST(ProductBasis, ProductSumEqualsItsFormsSummedToSecondOrder) {
  using mlip::models::ProductForm;
  const ProductCoupling pairs = pair_coupling();
  const std::vector<ProductForm> forms = {{staged_coupling(1, 11), {0, 1, 2, -1, -1}},
                                          {staged_coupling(2, 12), {0, 1, 3, -1, -1}},
                                          {staged_coupling(3, 13), {0, 1, 3, 2, -1}}};
  const auto base = random_operands(this->dtype(), 14);
  const auto u = random_operands(this->dtype(), 15);
  auto loss_grads = [&](bool summed) {
    auto r = base[0].clone().requires_grad_(true);
    auto w = base[1].clone().requires_grad_(true);
    auto a = base[4].clone().requires_grad_(true);
    const torch::Tensor none;
    const auto p = product_contract(0, {none, none, a, a, none}, pairs);
    torch::Tensor b;
    if (summed) {
      b = mlip::models::product_sum(0, {none, w, a, p}, forms);
    } else {
      b = product_contract(0, {none, w, a, none, none}, forms[0].coupling) +
          product_contract(0, {none, w, p, none, none}, forms[1].coupling) +
          product_contract(0, {none, w, p, a, none}, forms[2].coupling);
    }
    const auto first = torch::autograd::grad({(r * b).sum()}, {w, a}, {}, true, true);
    const auto loss = (first[0] * u[1]).sum() + (first[1] * u[4]).sum() + first[1].pow(2).sum();
    auto g = torch::autograd::grad({loss}, {r, w, a});
    g.push_back(b.detach());
    return g;
  };
  const auto reference = loss_grads(false);
  const char* names[] = {"d loss / d R", "d loss / d W", "d loss / d a", "B"};
  for (const bool twin : {false, true}) {
    SCOPED_TRACE(twin ? "the CUDA kernel's twin (accumulating the forms)" : "the CPU kernel");
    const auto fast = mlip::test::run_with_device_twins(twin, [&] { return loss_grads(true); });
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_GT(reference[k].abs().max().template item<double>(), 1e-3) << names[k] << ": a quantity that can differ";
      EXPECT_LT(relative(fast[k], reference[k]), this->tolerance()) << names[k];
    }
  }
}

TEST(ProductBasisErrors, ProductSumRefusesAnOperandInTwoSlotsOrInNoForm) {
  using mlip::models::ProductForm;
  const auto op = random_operands(torch::kFloat64, 16);
  const torch::Tensor none;
  const std::vector<ProductForm> twice = {{pair_coupling(), {0, -1, 1, 1, -1}}};
  EXPECT_NE(std::string(mlip::test::error_of([&] { mlip::models::product_sum(0, {none, op[4]}, twice); }))
                .find("operand 1 fills two slots of one form"),
            std::string::npos);
  const std::vector<ProductForm> one = {{staged_coupling(1), {0, 1, 2, -1, -1}}};
  EXPECT_NE(std::string(mlip::test::error_of([&] { mlip::models::product_sum(3, {op[0], op[1], op[4], none}, one); }))
                .find("no form holds operand 3"),
            std::string::npos);
}

// The CPU kernel is deterministic: bit-identical results for 1 and 2 threads (and so is the CUDA
// kernel's twin, as the kernel is: each element summed by one thread).
TYPED_TEST(ProductBasis, CpuKernelIsBitIdenticalForAnyThreadCount) {
  const auto coupling = random_coupling(7, 3);
  const auto op = random_operands(this->dtype(), 8);
  const int threads = at::get_num_threads();
  for (int64_t slot = 0; slot < 5; ++slot)
    for (auto kernel : {ProductKernel::kAuto, ProductKernel::kDevice}) {
      at::set_num_threads(1);
      const auto one = product_contract_kernel(slot, op, coupling, kernel);
      at::set_num_threads(2);
      const auto two = product_contract_kernel(slot, op, coupling, kernel);
      EXPECT_TRUE(torch::equal(one, two)) << "slot " << slot << name(kernel);
    }
  at::set_num_threads(threads);
}

// Operands of the wrong shape are an error naming the operand, not a crash.
TEST(ProductBasisErrors, WrongShapeNamesTheOperand) {
  const auto coupling = random_coupling(9, 3);
  auto op = random_operands(torch::kFloat64, 10);
  op[3] = op[3].narrow(1, 0, kRows[3] - 1);
  try {
    product_contract_kernel(0, op, coupling, ProductKernel::kAuto);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("operand 3 should be [6, 9, 5], got [6, 8, 5]"), std::string::npos)
        << e.what();
  }
}

// On a CUDA device (label gpu): the CUDA kernel against its host twin, every slot of products
// of one, two and three factors, on 700 nodes and 64 channels; then a product sum's first
// derivative through autograd (its forms accumulated by the kernel) against the CPU kernel.
TYPED_TEST(ProductBasis, CudaKernelEqualsItsHostTwin) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (or this build has no CUDA)";
  if (!mlip::models::cuda_kernels_compiled()) GTEST_SKIP() << "this build has no CUDA kernels (MLIP_CUDA_KERNELS=OFF)";
  auto gen = at::detail::createCPUGenerator(30);
  std::vector<torch::Tensor> big;
  for (int64_t rows : kRows)
    big.push_back(at::randn({700, rows, 64}, gen, torch::TensorOptions().dtype(torch::kFloat64)).to(this->dtype()));
  for (int64_t factors = 1; factors <= 3; ++factors) {
    const auto coupling = random_coupling(31, factors);
    const auto op = used(big, factors, true);
    std::vector<torch::Tensor> on_gpu;
    for (const auto& x : op) on_gpu.push_back(x.defined() ? x.to(torch::kCUDA) : x);
    for (int64_t slot = 0; slot < 2 + factors; ++slot) {
      const auto device = product_contract_kernel(slot, on_gpu, coupling, ProductKernel::kDevice);
      EXPECT_TRUE(device.is_cuda());
      EXPECT_LT(relative(device.cpu(), product_contract_kernel(slot, op, coupling, ProductKernel::kDevice)),
                this->tolerance())
          << factors << " factors, slot " << slot;
    }
  }
  using mlip::models::ProductForm;
  const std::vector<ProductForm> forms = {{staged_coupling(1, 11), {0, 1, 2, -1, -1}},
                                          {staged_coupling(2, 12), {0, 1, 3, -1, -1}},
                                          {staged_coupling(3, 13), {0, 1, 3, 2, -1}}};
  const auto base = random_operands(this->dtype(), 32);
  auto gradient = [&](const torch::Device& where) {
    auto r = base[0].to(where), w = base[1].to(where).requires_grad_(true), a = base[4].to(where);
    const auto p = base[2].to(where);
    const torch::Tensor none;
    const auto b = mlip::models::product_sum(0, {none, w, a, p}, forms);
    return torch::autograd::grad({(r * b).sum()}, {w})[0].cpu();
  };
  const auto cpu = gradient(torch::kCPU);
  mlip::models::set_device_kernels(true);
  const auto cuda = gradient(torch::kCUDA);
  mlip::models::set_device_kernels(false);
  EXPECT_LT(relative(cuda, cpu), this->tolerance()) << "d <R, B> / d W";
}

}  // namespace
