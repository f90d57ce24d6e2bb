#include "models/long_range/mesh_ewald.h"

#include <torch/script.h>

#include <cmath>
#include <complex>
#include <string>

#include "error.h"
#include "models/long_range/ewald.h"

namespace mlip::models {

namespace {

constexpr int kMaxOrder = 12;

/// The cardinal B-spline M_p at f + j for j = 0..p-1 (f in [0, 1)) and its derivative there
/// (docs/long_range.md "On a mesh").
void bspline(int order, double f, double* value, double* slope) {
  // Order 2: M_2(f) = f, M_2(f + 1) = 1 - f; then M_n(x) = (x M_{n-1}(x) + (n - x) M_{n-1}(x - 1)) / (n - 1).
  double m[kMaxOrder] = {};
  m[0] = f;
  m[1] = 1 - f;
  for (int n = 3; n <= order; ++n) {
    if (n == order)  // M_p'(x) = M_{p-1}(x) - M_{p-1}(x - 1)
      for (int j = 0; j < order; ++j) slope[j] = m[j] - (j > 0 ? m[j - 1] : 0.0);
    // In place from the top: m[j] still holds M_{n-1}(f + j) and m[j - 1] M_{n-1}(f + j - 1).
    for (int j = n - 1; j >= 0; --j) {
      const double x = f + j;
      m[j] = (x * m[j] + (n - x) * (j > 0 ? m[j - 1] : 0.0)) / (n - 1);
    }
  }
  for (int j = 0; j < order; ++j) value[j] = m[j];
}

/// |b(n)|² of one axis of K points: 1 / |Σ_{j=0}^{p-2} M_p(j+1) e^{2πi n j / K}|².
std::vector<double> spline_modulus(int order, int64_t points) {
  std::vector<double> at_integers(static_cast<size_t>(order), 0.0), unused(static_cast<size_t>(order), 0.0);
  bspline(order, 0.0, at_integers.data(), unused.data());  // M_p(j) for j = 0..p-1
  std::vector<double> out(static_cast<size_t>(points), 0.0);
  for (int64_t n = 0; n < points; ++n) {
    std::complex<double> sum = 0;
    for (int j = 0; j + 1 < order; ++j)
      sum += at_integers[size_t(j + 1)] * std::polar(1.0, 2 * M_PI * double(n) * j / double(points));
    out[size_t(n)] = 1.0 / std::norm(sum);
  }
  return out;
}

/// The smallest 2^a 3^b 5^c at least `n` (sizes the FFT handles fastest).
int64_t smooth_size(int64_t n) {
  for (int64_t m = std::max<int64_t>(n, 1);; ++m) {
    int64_t r = m;
    for (int64_t p : {2, 3, 5})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

}  // namespace

MeshSum::MeshSum(const LongRangeSettings& settings, const double* cell, int order, double oversampling)
    : settings_(settings), order_(order) {
  if (order < 4 || order > 12 || order % 2 != 0)
    throw Error("long-range mesh: expected an even B-spline order from 4 to 12, got " + std::to_string(order));
  if (!(oversampling >= 1))
    throw Error("long-range mesh: expected an oversampling of at least 1, got " + std::to_string(oversampling));
  const ReciprocalCell reciprocal(settings, cell);
  volume_ = reciprocal.volume;
  for (int a = 0; a < 9; ++a) inverse_[a] = reciprocal.inverse[a];
  for (int a = 0; a < 3; ++a)
    grid_[size_t(a)] = smooth_size(std::max<int64_t>(int64_t(std::ceil(oversampling * double(2 * reciprocal.reach[a] + 1))), order));
  std::array<std::vector<double>, 3> modulus;
  for (int a = 0; a < 3; ++a) modulus[size_t(a)] = spline_modulus(order, grid_[size_t(a)]);
  // Every kept n has |n_a| <= reach_a < K_a / 2 (the grid holds 2 reach_a + 1 points at least).
  for (int a = 0; a < 3; ++a) reach_[size_t(a)] = reciprocal.reach[a];
  const int64_t box[3] = {2 * reach_[0] + 1, 2 * reach_[1] + 1, reach_[2] + 1};
  coefficient_.assign(size_t(box[0] * box[1] * box[2]), 0.0);
  int64_t n[3];
  for (n[0] = -reach_[0]; n[0] <= reach_[0]; ++n[0])
    for (n[1] = -reach_[1]; n[1] <= reach_[1]; ++n[1])
      for (n[2] = 0; n[2] <= reach_[2]; ++n[2]) {
        if (n[0] == 0 && n[1] == 0 && n[2] == 0) continue;
        double k[3], weight, slope;
        if (!reciprocal.term(settings, n, k, weight, slope)) continue;
        int64_t index[3];  // n's point of the grid, and of the box
        for (int a = 0; a < 3; ++a) index[a] = n[a] >= 0 ? n[a] : grid_[size_t(a)] + n[a];
        const double b2 = modulus[0][size_t(index[0])] * modulus[1][size_t(index[1])] * modulus[2][size_t(index[2])];
        const int64_t row0 = n[0] >= 0 ? n[0] : box[0] + n[0], row1 = n[1] >= 0 ? n[1] : box[1] + n[1];
        const int64_t flat = (row0 * box[1] + row1) * box[2] + n[2];
        // ReciprocalSum's weight is for one of each ±k pair (doubled); over the full grid, half.
        coefficient_[size_t(flat)] = 0.5 * weight * b2;
        // The half grid stands for n and -n, except where -n is itself on it (n_2 = 0; n_2 = K2/2
        // is never kept).
        const double multiplicity = n[2] == 0 ? 1.0 : 2.0;
        kept_.push_back(flat);
        kept_k_.insert(kept_k_.end(), k, k + 3);
        kept_energy_.push_back(multiplicity * 0.5 * weight * b2);
        kept_slope_.push_back(multiplicity * 0.5 * slope * b2);
      }
}

void MeshSum::stencil(const double* r, int64_t* index, double* value, double* slope) const {
  for (int a = 0; a < 3; ++a) {
    const double s = r[0] * inverse_[a] + r[1] * inverse_[3 + a] + r[2] * inverse_[6 + a];  // fractional
    const int64_t points = grid_[size_t(a)];
    const double u = s * double(points);
    const double base = std::floor(u);
    // Points m = floor(u) - j, j = 0..p-1 (modulo K_a), with weights M_p(u - m) = M_p(f + j); kept
    // in ascending order of m (j = p-1 first), so that an unwrapped stencil is contiguous.
    const int64_t lowest = (((int64_t(base) - (order_ - 1)) % points) + points) % points;
    double v[kMaxOrder], d[kMaxOrder];
    bspline(order_, u - base, v, d);
    for (int j = 0; j < order_; ++j) {
      const int64_t m = lowest + j;
      index[a * order_ + j] = m < points ? m : m - points;
      value[a * order_ + j] = v[order_ - 1 - j];
      slope[a * order_ + j] = d[order_ - 1 - j];
    }
  }
}

void MeshSum::spread(int64_t n, const double* pos, const double* q, std::vector<double>& mesh) const {
  if (mesh.empty()) mesh.assign(size_t(grid_size()), 0.0);
  if (int64_t(mesh.size()) != grid_size()) throw Error("long-range mesh: a charge mesh of the wrong size");
  int64_t index[3 * kMaxOrder];
  double value[3 * kMaxOrder], slope[3 * kMaxOrder];
  const int p = order_;
  for (int64_t i = 0; i < n; ++i) {
    stencil(pos + 3 * i, index, value, slope);
    for (int j0 = 0; j0 < p; ++j0)
      for (int j1 = 0; j1 < p; ++j1) {
        const double w01 = q[i] * value[j0] * value[p + j1];
        double* row = mesh.data() + (index[j0] * grid_[1] + index[p + j1]) * grid_[2];
        const double* v2 = value + 2 * p;
        if (index[2 * p] + p <= grid_[2]) {  // contiguous along axis 2
          double* line = row + index[2 * p];
          for (int j2 = 0; j2 < p; ++j2) line[j2] += w01 * v2[j2];
        } else {
          for (int j2 = 0; j2 < p; ++j2) row[index[2 * p + j2]] += w01 * v2[j2];
        }
      }
  }
}

namespace {

/// Rows [0, reach] and [K - reach, K) of `t` along `dim` (n = 0..reach, then -reach..-1).
torch::Tensor ends(const torch::Tensor& t, int64_t dim, int64_t reach) {
  const int64_t k = t.size(dim);
  if (reach == 0) return t.narrow(dim, 0, 1);
  return torch::cat({t.narrow(dim, 0, reach + 1), t.narrow(dim, k - reach, reach)}, dim);
}

/// The inverse of ends(): `t` placed at those rows of a zero tensor of `k` rows along `dim`.
torch::Tensor spread_ends(const torch::Tensor& t, int64_t dim, int64_t reach, int64_t k) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[size_t(dim)] = k;
  torch::Tensor out = torch::zeros(shape, t.options());
  out.narrow(dim, 0, reach + 1).copy_(t.narrow(dim, 0, reach + 1));
  if (reach > 0) out.narrow(dim, k - reach, reach).copy_(t.narrow(dim, reach + 1, reach));
  return out;
}

}  // namespace

torch::Tensor MeshSum::to_box(const torch::Tensor& grid) const {
  // Axis by axis, each transform on the lines the next ones keep: F(n) for the box of kept n
  // equals the full 3-D transform's there.
  torch::Tensor t = at::fft_rfft(grid, c10::nullopt, 2).narrow(2, 0, reach_[2] + 1);
  t = ends(at::fft_fft(t, c10::nullopt, 1), 1, reach_[1]);
  return ends(at::fft_fft(t, c10::nullopt, 0), 0, reach_[0]).contiguous();
}

torch::Tensor MeshSum::from_box(const torch::Tensor& box) const {
  // The inverse real transform of the half grid that is zero outside the box (each inverse
  // transform divides by its length: 1 / K_total in all, as irfftn's).
  torch::Tensor t = at::fft_ifft(spread_ends(box, 0, reach_[0], grid_[0]), c10::nullopt, 0);
  t = at::fft_ifft(spread_ends(t, 1, reach_[1], grid_[1]), c10::nullopt, 1);
  std::vector<int64_t> shape = {grid_[0], grid_[1], grid_[2] / 2 + 1};
  torch::Tensor half = torch::zeros(shape, t.options());
  half.narrow(2, 0, reach_[2] + 1).copy_(t);
  return at::fft_irfft(half, grid_[2], 2);
}

double MeshSum::solve(const std::vector<double>& mesh, double charge_sum, double charge_square_sum,
                      std::vector<double>& potential_mesh, double* virial) const {
  if (int64_t(mesh.size()) != grid_size()) throw Error("long-range mesh: a charge mesh of the wrong size");
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor charges = torch::from_blob(const_cast<double*>(mesh.data()), {grid_[0], grid_[1], grid_[2]}, f64);
  // F(n) = Σ_m Q(m) e^{-2πi n·m/K} for the kept n with n_2 >= 0 (the rest are complex conjugates).
  const torch::Tensor transform = to_box(charges);
  const torch::Tensor coefficient = torch::from_blob(const_cast<double*>(coefficient_.data()),
                                                     {2 * reach_[0] + 1, 2 * reach_[1] + 1, reach_[2] + 1}, f64);
  const torch::Tensor power = torch::real(transform * torch::conj(transform)).contiguous();
  const double* p = power.data_ptr<double>();
  double quadratic = 0;
  for (size_t t = 0; t < kept_.size(); ++t) quadratic += kept_energy_[t] * p[kept_[t]];
  // ∂E/∂Q(m) = 2 Σ_n C(n) F(n) e^{+2πi n·m/K} = 2 K_total ifft(C F)(m), real since C(n) = C(-n).
  potential_mesh.resize(size_t(grid_size()));
  torch::from_blob(potential_mesh.data(), {grid_[0], grid_[1], grid_[2]}, f64)
      .copy_(from_box(coefficient * transform))
      .mul_(2.0 * double(grid_size()));
  const double background = background_coefficient(settings_) / volume_ * charge_sum * charge_sum;
  if (virial != nullptr) {
    for (int a = 0; a < 9; ++a) virial[a] = 0;
    for (size_t t = 0; t < kept_.size(); ++t) {
      const double s2 = p[kept_[t]];
      const double* k = kept_k_.data() + 3 * t;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) virial[3 * a + b] += kept_slope_[t] * s2 * k[a] * k[b];
    }
    for (int a = 0; a < 3; ++a) virial[4 * a] += quadratic - background;
  }
  return quadratic - self_coefficient(settings_) * charge_square_sum - background;
}

void MeshSum::potentials_and_forces(const std::vector<double>& potential_mesh, double charge_sum, int64_t n,
                                    const double* pos, const double* q, double* potentials, double* forces) const {
  if (int64_t(potential_mesh.size()) != grid_size()) throw Error("long-range mesh: a potential mesh of the wrong size");
  int64_t index[3 * kMaxOrder];
  double value[3 * kMaxOrder], slope[3 * kMaxOrder];
  const int p = order_;
  for (int64_t i = 0; i < n; ++i) {
    stencil(pos + 3 * i, index, value, slope);
    double phi = 0, grad_u[3] = {0, 0, 0};  // the gradient by the grid coordinates u_a
    for (int j0 = 0; j0 < p; ++j0)
      for (int j1 = 0; j1 < p; ++j1) {
        const double* row = potential_mesh.data() + (index[j0] * grid_[1] + index[p + j1]) * grid_[2];
        double sum_v = 0, sum_d = 0;  // along axis 2: Σ Φ M and Σ Φ M'
        const double *v2 = value + 2 * p, *d2 = slope + 2 * p;
        if (index[2 * p] + p <= grid_[2]) {  // contiguous along axis 2
          const double* line = row + index[2 * p];
          for (int j2 = 0; j2 < p; ++j2) {
            sum_v += line[j2] * v2[j2];
            sum_d += line[j2] * d2[j2];
          }
        } else {
          for (int j2 = 0; j2 < p; ++j2) {
            const double g = row[index[2 * p + j2]];
            sum_v += g * v2[j2];
            sum_d += g * d2[j2];
          }
        }
        const double v0 = value[j0], v1 = value[p + j1];
        phi += v0 * v1 * sum_v;
        grad_u[0] += slope[j0] * v1 * sum_v;
        grad_u[1] += v0 * slope[p + j1] * sum_v;
        grad_u[2] += v0 * v1 * sum_d;
      }
    if (potentials != nullptr)
      potentials[i] = phi - 2 * self_coefficient(settings_) * q[i] -
                      2 * background_coefficient(settings_) / volume_ * charge_sum;
    if (forces != nullptr)
      for (int b = 0; b < 3; ++b) {
        // u_a = K_a (r cell⁻¹)_a: ∂u_a/∂r_b = K_a cell⁻¹[b][a].
        double grad = 0;
        for (int a = 0; a < 3; ++a) grad += grad_u[a] * double(grid_[size_t(a)]) * inverse_[3 * b + a];
        forces[3 * i + b] = -q[i] * grad;
      }
  }
}

}  // namespace mlip::models
