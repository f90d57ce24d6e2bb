#include "models/se_e2_a/fitting_adjoint.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <string>
#include <vector>

// FittingAdjoint against the same net written with LibTorch tensors and differentiated by
// autograd twice (create_graph): E, dE/dx, and the gradient of
// L = sum_r ebar_r E_r + sum_r gbar_r . dE/dx_r with respect to x and every parameter.

namespace {

using mlip::models::FittingAdjoint;
using mlip::models::Layer;

struct Case {
  std::vector<int64_t> widths;  // input width, then the hidden layers
  bool resnet_dt;
  int threads;
};

template <typename Real>
class FittingAdjointTest : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(FittingAdjointTest, Reals);

/// The reference forward pass: E [n] of rows x [n, in0].
template <typename Params>
torch::Tensor reference_energy(const std::vector<Layer>& layers, const Params& p, const torch::Tensor& x) {
  torch::Tensor h = x;
  for (size_t l = 0; l < layers.size(); ++l) {
    torch::Tensor y = torch::tanh(torch::addmm(p.b[l], h, p.w[l]));
    if (layers[l].idt) y = y * p.idt[l];
    if (layers[l].skip == Layer::kSame) y = y + h;
    if (layers[l].skip == Layer::kDouble) y = y + torch::cat({h, h}, 1);
    h = y;
  }
  return torch::addmm(p.bout, h, p.wout).squeeze(1);
}

TYPED_TEST(FittingAdjointTest, MatchesDoubleBackwardOfAutograd) {
  using Real = TypeParam;
  const auto dtype = c10::CppTypeToScalarType<Real>::value;
  const double tol = std::is_same_v<Real, double> ? 1e-10 : 2e-4;
  const int saved_threads = at::get_num_threads();
  const std::vector<Case> cases = {
      {{12, 8, 8, 16}, true, 2},   // no skip, same-width skip, double-width skip, with idt
      {{12, 8, 8, 16}, false, 1},  // the same without idt, one thread
      {{10, 6}, false, 3},         // one hidden layer, more threads than the rows of a range
      {{7}, false, 2},             // no hidden layer: E = x wout + bout
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("widths[0] " + std::to_string(k.widths[0]) + ", " + std::to_string(k.widths.size() - 1) +
                 " hidden layers, resnet_dt " + std::to_string(k.resnet_dt) + ", threads " + std::to_string(k.threads));
    at::set_num_threads(k.threads);
    torch::manual_seed(7);
    const std::vector<Layer> layers = mlip::models::layers_of(k.widths, k.resnet_dt);
    const auto opts = torch::TensorOptions().dtype(dtype);
    typename FittingAdjoint<Real>::Params p;
    for (const Layer& L : layers) {
      p.w.push_back((torch::randn({L.in, L.out}, opts) / std::sqrt(double(L.in))).requires_grad_());
      p.b.push_back(torch::randn({L.out}, opts).requires_grad_());
      p.idt.push_back(L.idt ? (0.1 + 0.2 * torch::rand({L.out}, opts)).requires_grad_() : torch::Tensor());
    }
    const int64_t width = k.widths.back(), in0 = k.widths.front();
    p.wout = torch::randn({width, 1}, opts).requires_grad_();
    p.bout = torch::randn({1}, opts).requires_grad_();

    // 9 rows in the batch; the net sees rows 7, 1, 4, 2, 8 (gathered), the others stay as they were.
    const int64_t rows = 9;
    const std::vector<int64_t> index = {7, 1, 4, 2, 8};
    const torch::Tensor x = torch::randn({rows, in0}, opts);
    const torch::Tensor ebar = torch::randn({rows}, opts), gbar = torch::randn({rows, in0}, opts);
    torch::Tensor e = torch::full({rows}, -5.0, opts), dedx = torch::full({rows, in0}, -5.0, opts);
    torch::Tensor xbar = torch::full({rows, in0}, -5.0, opts);

    FittingAdjoint<Real> net(layers);
    {
      torch::NoGradGuard no_grad;
      net.forward(p, x.data_ptr<Real>(), index.data(), int64_t(index.size()), e.data_ptr<Real>(),
                  dedx.data_ptr<Real>());
      net.backward(gbar.data_ptr<Real>(), ebar.data_ptr<Real>(), xbar.data_ptr<Real>());
    }
    std::vector<torch::Tensor> params;
    for (size_t l = 0; l < layers.size(); ++l) {
      params.push_back(p.w[l]);
      params.push_back(p.b[l]);
      if (layers[l].idt) params.push_back(p.idt[l]);
    }
    params.push_back(p.wout);
    params.push_back(p.bout);
    std::vector<torch::Tensor> got;
    for (auto& t : params) {
      ASSERT_TRUE(t.grad().defined());
      got.push_back(t.grad().clone());
      t.mutable_grad() = torch::Tensor();
    }

    // The reference on the gathered rows.
    const torch::Tensor idx = torch::tensor(index, torch::kInt64);
    const torch::Tensor xr = x.index_select(0, idx).requires_grad_();
    const torch::Tensor er = reference_energy(layers, p, xr);
    const torch::Tensor gr = torch::autograd::grad({er.sum()}, {xr}, {}, true, true)[0];
    const torch::Tensor loss =
        (ebar.index_select(0, idx) * er).sum() + (gbar.index_select(0, idx) * gr).sum();
    std::vector<torch::Tensor> inputs = params;
    inputs.push_back(xr);
    const auto ref = torch::autograd::grad({loss}, inputs);

    auto expect_close = [&](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
      const double scale = std::max(1.0, b.abs().max().item<double>());
      const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
      EXPECT_LE(diff, tol * scale) << what;
    };
    expect_close(e.index_select(0, idx), er.detach(), "E");
    expect_close(dedx.index_select(0, idx), gr.detach(), "dE/dx");
    expect_close(xbar.index_select(0, idx), ref.back(), "dL/dx");
    for (size_t t = 0; t < params.size(); ++t) expect_close(got[t], ref[t], "parameter " + std::to_string(t));
    // Rows the net does not own are not written.
    for (int64_t r : {0, 3, 5, 6}) {
      EXPECT_EQ(e[r].item<double>(), -5.0);
      EXPECT_EQ(dedx[r].min().item<double>(), -5.0);
      EXPECT_EQ(dedx[r].max().item<double>(), -5.0);
      EXPECT_EQ(xbar[r].max().item<double>(), -5.0);
    }
    // A second backward adds to the gradients (accumulation, as autograd's .grad).
    {
      torch::NoGradGuard no_grad;
      for (size_t t = 0; t < params.size(); ++t) params[t].mutable_grad() = got[t].clone();
      net.backward(gbar.data_ptr<Real>(), ebar.data_ptr<Real>(), xbar.data_ptr<Real>());
    }
    for (size_t t = 0; t < params.size(); ++t)
      expect_close(params[t].grad(), 2 * ref[t], "accumulated parameter " + std::to_string(t));
    for (auto& t : params) t.mutable_grad() = torch::Tensor();
  }
  at::set_num_threads(saved_threads);
}

/// The error of forward() on a [4] -> [3] net whose first weight is `w0`.
std::string error_for_first_weight(const torch::Tensor& w0) {
  const std::vector<Layer> layers = mlip::models::layers_of({4, 3}, false);
  FittingAdjoint<double>::Params p;
  p.w = {w0};
  p.b = {torch::zeros({3}, torch::kFloat64)};
  p.idt = {torch::Tensor()};
  p.wout = torch::zeros({3, 1}, torch::kFloat64);
  p.bout = torch::zeros({1}, torch::kFloat64);
  FittingAdjoint<double> net(layers);
  const std::vector<double> x(8, 0.0);
  const std::vector<int64_t> index = {0, 1};
  std::vector<double> e(2), dedx(8);
  try {
    net.forward(p, x.data(), index.data(), 2, e.data(), dedx.data());
  } catch (const std::exception& err) {
    return err.what();
  }
  return "";
}

TEST(FittingAdjoint, RejectsAWeightOfTheWrongShapeOrDtype) {
  const std::string shape = error_for_first_weight(torch::zeros({3, 4}, torch::kFloat64));
  EXPECT_NE(shape.find("w0 has shape [3, 4], the layers need [4, 3]"), std::string::npos) << shape;
  const std::string dtype = error_for_first_weight(torch::zeros({4, 3}, torch::kFloat32));
  EXPECT_NE(dtype.find("w0 must be a contiguous tensor of the model's dtype"), std::string::npos) << dtype;
}

}  // namespace
