#include "models/equivariant/spherical.h"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "error.h"

namespace mlip::models {
namespace {

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string make_source() {
  // Homogeneous harmonic polynomials (real solid harmonics) times sqrt(4 pi): on unit vectors
  // they are the component-normalised real spherical harmonics.
  const double s3 = std::sqrt(3.0), s5 = std::sqrt(5.0), s15 = std::sqrt(15.0), s7 = std::sqrt(7.0);
  const double s105 = std::sqrt(105.0), s35_2 = std::sqrt(35.0 / 2.0), s21_2 = std::sqrt(21.0 / 2.0);
  std::string s;
  s += "def spherical_harmonics(self, d: Tensor, l_max: int) -> Tensor:\n";
  s += "    x = d[:, 0]\n    y = d[:, 1]\n    z = d[:, 2]\n";
  s += "    out: List[Tensor] = [torch.ones_like(x)]\n";
  s += "    if l_max >= 1:\n";
  s += "        out.append(" + number(s3) + " * y)\n";
  s += "        out.append(" + number(s3) + " * z)\n";
  s += "        out.append(" + number(s3) + " * x)\n";
  s += "    if l_max >= 2:\n";
  s += "        out.append(" + number(s15) + " * x * y)\n";
  s += "        out.append(" + number(s15) + " * y * z)\n";
  s += "        out.append(" + number(s5 / 2) + " * (2.0 * z * z - x * x - y * y))\n";
  s += "        out.append(" + number(s15) + " * x * z)\n";
  s += "        out.append(" + number(s15 / 2) + " * (x * x - y * y))\n";
  s += "    if l_max >= 3:\n";
  s += "        out.append(" + number(s35_2 / 2) + " * y * (3.0 * x * x - y * y))\n";
  s += "        out.append(" + number(s105) + " * x * y * z)\n";
  s += "        out.append(" + number(s21_2 / 2) + " * y * (4.0 * z * z - x * x - y * y))\n";
  s += "        out.append(" + number(s7 / 2) + " * z * (2.0 * z * z - 3.0 * x * x - 3.0 * y * y))\n";
  s += "        out.append(" + number(s21_2 / 2) + " * x * (4.0 * z * z - x * x - y * y))\n";
  s += "        out.append(" + number(s105 / 2) + " * z * (x * x - y * y))\n";
  s += "        out.append(" + number(s35_2 / 2) + " * x * (x * x - 3.0 * y * y))\n";
  s += "    return torch.stack(out, dim=1)\n";
  return s;
}

void check_l(int64_t l, const char* what) {
  if (l < 0 || l > kMaxL)
    throw Error(std::string(what) + ": expected 0 <= l <= " + std::to_string(kMaxL) + ", got " + std::to_string(l));
}

/// Fixed, well spread directions (a Fibonacci sphere): the least-squares fit of D_l.
at::Tensor sample_directions() {
  const int64_t n = 40;
  auto d = at::empty({n, 3}, at::kDouble);
  auto a = d.accessor<double, 2>();
  const double golden = M_PI * (3.0 - std::sqrt(5.0));
  for (int64_t k = 0; k < n; ++k) {
    const double z = 1.0 - 2.0 * (double(k) + 0.5) / double(n), r = std::sqrt(1.0 - z * z);
    a[k][0] = r * std::cos(golden * double(k));
    a[k][1] = r * std::sin(golden * double(k));
    a[k][2] = z;
  }
  return d;
}

/// Rotation by `angle` about the axis (ax, ay, az) (Rodrigues).
at::Tensor rotation(double ax, double ay, double az, double angle) {
  const double n = std::sqrt(ax * ax + ay * ay + az * az);
  ax /= n, ay /= n, az /= n;
  const double c = std::cos(angle), s = std::sin(angle), t = 1.0 - c;
  return at::tensor({t * ax * ax + c, t * ax * ay - s * az, t * ax * az + s * ay,  //
                     t * ax * ay + s * az, t * ay * ay + c, t * ay * az - s * ax,  //
                     t * ax * az - s * ay, t * ay * az + s * ax, t * az * az + c},
                    at::kDouble)
      .reshape({3, 3});
}

}  // namespace

const std::string& spherical_harmonics_source() {
  static const std::string source = make_source();
  return source;
}

at::Tensor spherical_harmonics(const at::Tensor& unit, int64_t l_max) {
  check_l(l_max, "spherical_harmonics");
  static std::mutex mutex;
  static std::unique_ptr<torch::jit::Module> module;
  std::lock_guard<std::mutex> lock(mutex);
  if (!module) {
    module = std::make_unique<torch::jit::Module>("SphericalHarmonics");
    module->define(spherical_harmonics_source());
  }
  return module->run_method("spherical_harmonics", unit, l_max).toTensor();
}

at::Tensor wigner_d(int64_t l, const at::Tensor& rotation_matrix) {
  check_l(l, "wigner_d");
  static const at::Tensor points = sample_directions();
  const auto r = rotation_matrix.to(at::kDouble);
  const auto y = spherical_harmonics(points, l).narrow(1, l * l, 2 * l + 1);
  const auto yr = spherical_harmonics(points.matmul(r.t()), l).narrow(1, l * l, 2 * l + 1);
  // Rows: Y(R d_k) = D Y(d_k)  <=>  y D^T = yr. Solved by QR without pivoting (LAPACK gels; y
  // has full column rank): LibTorch 1.13's default CPU driver, gelsy, reads a pivot array it
  // never initialises, so its result depended on the heap's leftovers (docs/training.md
  // "Reproducibility").
  return std::get<0>(at::linalg_lstsq(y, yr, c10::nullopt, std::string("gels"))).t().contiguous();
}

at::Tensor wigner_3j(int64_t l1, int64_t l2, int64_t l3) {
  check_l(l1, "wigner_3j");
  check_l(l2, "wigner_3j");
  check_l(l3, "wigner_3j");
  if (l3 < std::abs(l1 - l2) || l3 > l1 + l2)
    throw Error("wigner_3j: (" + std::to_string(l1) + ", " + std::to_string(l2) + ", " + std::to_string(l3) +
                ") violates |l1 - l2| <= l3 <= l1 + l2");
  const int64_t n = (2 * l1 + 1) * (2 * l2 + 1) * (2 * l3 + 1);
  auto m = at::zeros({n, n}, at::kDouble);
  const auto eye = at::eye(n, at::kDouble);
  // Two generic rotations generate a dense subgroup of SO(3): their common invariant tensors
  // are those of SO(3).
  for (const auto& r : {rotation(0.3, 0.5, 0.8, 0.7), rotation(-0.6, 0.2, 0.4, 2.1)}) {
    const auto k = at::kron(wigner_d(l1, r), at::kron(wigner_d(l2, r), wigner_d(l3, r))) - eye;
    m += k.t().matmul(k);
  }
  const auto [values, vectors] = at::linalg_eigh(m);
  const double v0 = values[0].item<double>(), v1 = n > 1 ? values[1].item<double>() : 1.0;
  if (!(v0 < 1e-10) || !(v1 > 1e-6))
    throw Error("wigner_3j: expected a one-dimensional invariant space for (" + std::to_string(l1) + ", " +
                std::to_string(l2) + ", " + std::to_string(l3) + "), eigenvalues " + std::to_string(v0) + ", " +
                std::to_string(v1));
  auto c = vectors.select(1, 0).clone();
  c /= c.norm();
  // Clean round-off zeros, then fix the sign by the first significant entry.
  c.masked_fill_(c.abs() < 1e-14, 0.0);
  const auto acc = c.accessor<double, 1>();
  for (int64_t k = 0; k < n; ++k)
    if (std::abs(acc[k]) > 1e-8) {
      if (acc[k] < 0) c.neg_();
      break;
    }
  return c.reshape({2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1});
}

}  // namespace mlip::models
