#include "models/equivariant/edge_geometry.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "error.h"

namespace mlip::models {

EdgeGeometry edge_geometry_by_autograd(torch::jit::Module& module, const torch::Tensor& d, int64_t num_bessels,
                                       int64_t num_harmonics) {
  constexpr int64_t chunk = 2048;  // edges at a time, so that the copies stay small
  const int64_t edges = d.size(0), copies = num_bessels + num_harmonics;
  std::vector<torch::Tensor> basis, basis_jacobian, y, y_jacobian;
  torch::AutoGradMode grad_mode(true);
  for (int64_t e0 = 0; e0 < std::max<int64_t>(edges, 1); e0 += chunk) {
    const int64_t n = std::min(chunk, edges - e0);
    const auto repeated = d.narrow(0, e0, n).detach().unsqueeze(0).expand({copies, n, 3}).contiguous();
    repeated.requires_grad_(true);
    const auto geometry = module.get_method("edge_geometry")({repeated.reshape({copies * n, 3})}).toTuple();
    const auto b = geometry->elements()[0].toTensor().reshape({copies, n, num_bessels});
    const auto h = geometry->elements()[1].toTensor().reshape({copies, n, num_harmonics});
    // Copy k < B carries basis column k; copy B + k carries harmonic k.
    const auto carried = b.narrow(0, 0, num_bessels).diagonal(0, 0, 2).sum() +
                         h.narrow(0, num_bessels, num_harmonics).diagonal(0, 0, 2).sum();
    const auto jacobian = torch::autograd::grad({carried}, {repeated}, {}, false, false, true)[0];
    basis.push_back(b.select(0, 0).detach());
    y.push_back(h.select(0, 0).detach());
    if (jacobian.defined()) {
      basis_jacobian.push_back(jacobian.narrow(0, 0, num_bessels).permute({1, 0, 2}));
      y_jacobian.push_back(jacobian.narrow(0, num_bessels, num_harmonics).permute({1, 0, 2}));
    } else {  // no edges
      basis_jacobian.push_back(torch::zeros({n, num_bessels, 3}, d.options()));
      y_jacobian.push_back(torch::zeros({n, num_harmonics, 3}, d.options()));
    }
  }
  return {torch::cat(basis), torch::cat(basis_jacobian).contiguous(), torch::cat(y),
          torch::cat(y_jacobian).contiguous()};
}

namespace {

/// The harmonics of the unit vector (x, y, z) up to l_max (spherical.h: the polynomials of
/// spherical_harmonics_source(), component normalised) and their gradients by (x, y, z), as
/// polynomials in the components: y[k], g[k] = ∂y[k]/∂(x, y, z).
template <typename T>
void harmonics_with_gradients(T x, T y, T z, int64_t l_max, T* out, std::array<T, 3>* g) {
  const T s3 = T(std::sqrt(3.0)), s5 = T(std::sqrt(5.0)), s15 = T(std::sqrt(15.0)), s7 = T(std::sqrt(7.0));
  const T s105 = T(std::sqrt(105.0)), s35_2 = T(std::sqrt(35.0 / 2.0)), s21_2 = T(std::sqrt(21.0 / 2.0));
  out[0] = T(1), g[0] = {0, 0, 0};
  if (l_max < 1) return;
  out[1] = s3 * y, g[1] = {0, s3, 0};
  out[2] = s3 * z, g[2] = {0, 0, s3};
  out[3] = s3 * x, g[3] = {s3, 0, 0};
  if (l_max < 2) return;
  out[4] = s15 * x * y, g[4] = {s15 * y, s15 * x, 0};
  out[5] = s15 * y * z, g[5] = {0, s15 * z, s15 * y};
  out[6] = s5 / 2 * (2 * z * z - x * x - y * y), g[6] = {-s5 * x, -s5 * y, 2 * s5 * z};
  out[7] = s15 * x * z, g[7] = {s15 * z, 0, s15 * x};
  out[8] = s15 / 2 * (x * x - y * y), g[8] = {s15 * x, -s15 * y, 0};
  if (l_max < 3) return;
  const T a = s35_2 / 2, b = s21_2 / 2, c = s7 / 2, e = s105 / 2;
  out[9] = a * y * (3 * x * x - y * y), g[9] = {6 * a * x * y, 3 * a * (x * x - y * y), 0};
  out[10] = s105 * x * y * z, g[10] = {s105 * y * z, s105 * x * z, s105 * x * y};
  out[11] = b * y * (4 * z * z - x * x - y * y),
  g[11] = {-2 * b * x * y, b * (4 * z * z - x * x - 3 * y * y), 8 * b * y * z};
  out[12] = c * z * (2 * z * z - 3 * x * x - 3 * y * y),
  g[12] = {-6 * c * x * z, -6 * c * y * z, c * (6 * z * z - 3 * x * x - 3 * y * y)};
  out[13] = b * x * (4 * z * z - x * x - y * y),
  g[13] = {b * (4 * z * z - 3 * x * x - y * y), -2 * b * x * y, 8 * b * x * z};
  out[14] = e * z * (x * x - y * y), g[14] = {2 * e * x * z, -2 * e * y * z, e * (x * x - y * y)};
  out[15] = a * x * (x * x - 3 * y * y), g[15] = {3 * a * (x * x - y * y), -6 * a * x * y, 0};
}

template <typename T>
void direct(const EquivariantConfig& c, const T* d, int64_t edges, T* basis, T* basis_jacobian, T* y, T* y_jacobian) {
  const int64_t nb = c.num_bessels, nh = (c.l_max + 1) * (c.l_max + 1);
  const double p = c.polynomial_p;
  // The cutoff u(x) = 1 - A x^p + B x^(p+1) - D x^(p+2) below x = r / r_max = 1, zero above.
  const T A = T((p + 1) * (p + 2) / 2), B = T(p * (p + 2)), D = T(p * (p + 1) / 2);
  const T rmax = T(c.r_max), scale = T(2.0 / c.r_max), wave = T(M_PI / c.r_max), pt = T(p);
  std::vector<T> h(static_cast<size_t>(nh));
  std::vector<std::array<T, 3>> g(static_cast<size_t>(nh));
  for (int64_t e = 0; e < edges; ++e) {
    const T dx = d[3 * e], dy = d[3 * e + 1], dz = d[3 * e + 2];
    const T r = std::sqrt(dx * dx + dy * dy + dz * dz);
    if (!(r > T(0))) throw Error("edge geometry: edge " + std::to_string(e) + " has zero length");
    const T ux = dx / r, uy = dy / r, uz = dz / r, x = r / rmax;
    T cut = 0, cut_dr = 0;  // u(x) and du/dr
    if (x < T(1)) {
      const T xp = std::pow(x, pt), xp1 = std::pow(x, pt + 1), xp2 = std::pow(x, pt + 2);
      cut = T(1) - A * xp + B * xp1 - D * xp2;
      cut_dr = (-A * pt * std::pow(x, pt - 1) + B * (pt + 1) * xp - D * (pt + 2) * xp1) / rmax;
    }
    for (int64_t k = 0; k < nb; ++k) {
      const T w = T(k + 1) * wave, s = std::sin(w * r), co = std::cos(w * r);
      basis[e * nb + k] = scale * s / r * cut;
      // d/dr [scale sin(w r) / r u] along the unit vector.
      const T dr = scale * ((w * co * r - s) / (r * r) * cut + s / r * cut_dr);
      T* jb = basis_jacobian + (e * nb + k) * 3;
      jb[0] = dr * ux, jb[1] = dr * uy, jb[2] = dr * uz;
    }
    harmonics_with_gradients(ux, uy, uz, c.l_max, h.data(), g.data());
    for (int64_t k = 0; k < nh; ++k) {
      y[e * nh + k] = h[size_t(k)];
      // d y(d / r) / d d = (g - (g · u) u) / r
      const auto& gk = g[size_t(k)];
      const T radial = gk[0] * ux + gk[1] * uy + gk[2] * uz;
      T* jy = y_jacobian + (e * nh + k) * 3;
      jy[0] = (gk[0] - radial * ux) / r, jy[1] = (gk[1] - radial * uy) / r, jy[2] = (gk[2] - radial * uz) / r;
    }
  }
}

}  // namespace

EdgeGeometry edge_geometry_direct(const EquivariantConfig& c, const torch::Tensor& d) {
  if (!d.device().is_cpu() || d.dim() != 2 || d.size(1) != 3 ||
      (d.scalar_type() != torch::kFloat32 && d.scalar_type() != torch::kFloat64))
    throw Error("edge geometry: expected host edge vectors [E, 3] of float32 or float64, got " + c10::str(d.sizes()) +
                " " + std::string(c10::toString(d.scalar_type())) + " on " + d.device().str());
  c.validate();
  const int64_t edges = d.size(0), nb = c.num_bessels, nh = (c.l_max + 1) * (c.l_max + 1);
  const auto vectors = d.contiguous();
  EdgeGeometry g{torch::empty({edges, nb}, d.options()), torch::empty({edges, nb, 3}, d.options()),
                 torch::empty({edges, nh}, d.options()), torch::empty({edges, nh, 3}, d.options())};
  if (d.scalar_type() == torch::kFloat64)
    direct<double>(c, vectors.data_ptr<double>(), edges, g.basis.data_ptr<double>(),
                   g.basis_jacobian.data_ptr<double>(), g.y.data_ptr<double>(), g.y_jacobian.data_ptr<double>());
  else
    direct<float>(c, vectors.data_ptr<float>(), edges, g.basis.data_ptr<float>(), g.basis_jacobian.data_ptr<float>(),
                  g.y.data_ptr<float>(), g.y_jacobian.data_ptr<float>());
  return g;
}

}  // namespace mlip::models
