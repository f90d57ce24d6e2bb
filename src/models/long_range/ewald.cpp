#include "models/long_range/ewald.h"

#include <cmath>
#include <string>

#include "error.h"

namespace mlip::models {

namespace {

/// The taper w(t) = 1 - t³(10 - 15t + 6t²) on t in [0, 1] and dw/dt (docs/long_range.md).
void taper(double t, double& w, double& slope) {
  if (t <= 0) {
    w = 1;
    slope = 0;
  } else if (t >= 1) {
    w = 0;
    slope = 0;
  } else {
    w = 1 - t * t * t * (10 - 15 * t + 6 * t * t);
    slope = -30 * t * t * (1 - t) * (1 - t);
  }
}

}  // namespace

double self_coefficient(const LongRangeSettings& s) { return kCoulomb / (s.sigma * std::sqrt(2.0 * M_PI)); }
double background_coefficient(const LongRangeSettings& s) { return M_PI * kCoulomb * s.sigma * s.sigma; }

ReciprocalCell::ReciprocalCell(const LongRangeSettings& settings, const double* c) {
  const double det = c[0] * (c[4] * c[8] - c[5] * c[7]) - c[1] * (c[3] * c[8] - c[5] * c[6]) +
                     c[2] * (c[3] * c[7] - c[4] * c[6]);
  volume = std::abs(det);
  if (!(volume > 1e-12) || !std::isfinite(volume))
    throw Error("long-range energy: the cell is singular (volume " + std::to_string(volume) + " Å³)");
  double* inv = inverse;
  inv[0] = (c[4] * c[8] - c[5] * c[7]) / det;
  inv[1] = (c[2] * c[7] - c[1] * c[8]) / det;
  inv[2] = (c[1] * c[5] - c[2] * c[4]) / det;
  inv[3] = (c[5] * c[6] - c[3] * c[8]) / det;
  inv[4] = (c[0] * c[8] - c[2] * c[6]) / det;
  inv[5] = (c[2] * c[3] - c[0] * c[5]) / det;
  inv[6] = (c[3] * c[7] - c[4] * c[6]) / det;
  inv[7] = (c[1] * c[6] - c[0] * c[7]) / det;
  inv[8] = (c[0] * c[4] - c[1] * c[3]) / det;
  // n_a = k · a_a / 2π, so |n_a| <= k_end |a_a| / 2π for every k inside k_end, however skewed.
  for (int a = 0; a < 3; ++a) {
    const double length = std::sqrt(c[3 * a] * c[3 * a] + c[3 * a + 1] * c[3 * a + 1] + c[3 * a + 2] * c[3 * a + 2]);
    reach[a] = int64_t(std::floor(length * settings.k_end() / (2 * M_PI)));
  }
}

void ReciprocalCell::k_of(const int64_t n[3], double k[3]) const {
  for (int b = 0; b < 3; ++b)
    k[b] = 2 * M_PI * (double(n[0]) * inverse[b * 3] + double(n[1]) * inverse[b * 3 + 1] + double(n[2]) * inverse[b * 3 + 2]);
}

bool ReciprocalCell::term(const LongRangeSettings& settings, const int64_t n[3], double k[3], double& weight,
                          double& slope) const {
  k_of(n, k);
  const double k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
  if (!(k2 < settings.k_end() * settings.k_end())) return false;
  reciprocal_weight(settings, volume, k2, weight, slope);
  return true;
}

void reciprocal_weight(const LongRangeSettings& settings, double volume, double k2, double& weight, double& slope) {
  const double kn = std::sqrt(k2), k_max = settings.k_max(), k_end = settings.k_end();
  double w, w_slope;
  taper((kn - k_max) / (k_end - k_max), w, w_slope);
  w_slope /= (k_end - k_max);
  const double prefactor = 4 * M_PI * kCoulomb / volume;
  const double half_sigma2 = 0.5 * settings.sigma * settings.sigma;
  const double gauss = std::exp(-half_sigma2 * k2) / k2;
  weight = prefactor * w * gauss;
  // d/dk [w(k) exp(-σ²k²/2) / k²] = gauss (w' - w (σ² k + 2 / k)), divided by k.
  slope = prefactor * gauss * (w_slope - w * (2 * half_sigma2 * kn + 2 / kn)) / kn;
}

ReciprocalSum::ReciprocalSum(const LongRangeSettings& settings, const double* cell) : settings_(settings) {
  const ReciprocalCell reciprocal(settings, cell);
  volume_ = reciprocal.volume;
  const int64_t* reach = reciprocal.reach;
  for (int a = 0; a < 3; ++a) reach_[a] = reach[a];
  int64_t n[3];
  for (n[0] = 0; n[0] <= reach[0]; ++n[0])
    for (n[1] = -reach[1]; n[1] <= reach[1]; ++n[1])
      for (n[2] = -reach[2]; n[2] <= reach[2]; ++n[2]) {
        if (n[0] == 0 && (n[1] < 0 || (n[1] == 0 && n[2] <= 0))) continue;  // one of each ±n pair, n ≠ 0
        double k[3], weight, slope;
        if (!reciprocal.term(settings, n, k, weight, slope)) continue;
        k_.insert(k_.end(), k, k + 3);
        n_.insert(n_.end(), n, n + 3);
        weight_.push_back(weight);
        weight_slope_.push_back(slope);
      }
}

void ReciprocalSum::add_structure_factor(int64_t n, const double* pos, const double* q, std::vector<double>& s) const {
  const int64_t K = size();
  if (s.empty()) s.assign(2 * K, 0.0);
  if (int64_t(s.size()) != 2 * K) throw Error("long-range energy: a structure factor of the wrong size");
  for (int64_t i = 0; i < n; ++i) {
    const double* r = pos + 3 * i;
    for (int64_t k = 0; k < K; ++k) {
      const double kr = k_[3 * k] * r[0] + k_[3 * k + 1] * r[1] + k_[3 * k + 2] * r[2];
      s[k] += q[i] * std::cos(kr);
      s[K + k] += q[i] * std::sin(kr);
    }
  }
}

double ReciprocalSum::energy(const std::vector<double>& s, double charge_sum, double charge_square_sum) const {
  const int64_t K = size();
  double e = 0;
  for (int64_t k = 0; k < K; ++k) e += weight_[k] * (s[k] * s[k] + s[K + k] * s[K + k]);
  return e - self_coefficient(settings_) * charge_square_sum -
         background_coefficient(settings_) / volume_ * charge_sum * charge_sum;
}

void ReciprocalSum::potentials_and_forces(const std::vector<double>& s, double charge_sum, int64_t n,
                                          const double* pos, const double* q, double* potentials,
                                          double* forces) const {
  const int64_t K = size();
  for (int64_t i = 0; i < n; ++i) {
    const double* r = pos + 3 * i;
    double phi = 0, grad[3] = {0, 0, 0};
    for (int64_t k = 0; k < K; ++k) {
      const double kr = k_[3 * k] * r[0] + k_[3 * k + 1] * r[1] + k_[3 * k + 2] * r[2];
      const double c = std::cos(kr), sn = std::sin(kr);
      phi += 2 * weight_[k] * (c * s[k] + sn * s[K + k]);
      const double along = 2 * weight_[k] * (-sn * s[k] + c * s[K + k]);
      for (int b = 0; b < 3; ++b) grad[b] += along * k_[3 * k + b];
    }
    if (potentials != nullptr)
      potentials[i] = phi - 2 * self_coefficient(settings_) * q[i] -
                      2 * background_coefficient(settings_) / volume_ * charge_sum;
    if (forces != nullptr)
      for (int b = 0; b < 3; ++b) forces[3 * i + b] = -q[i] * grad[b];
  }
}

void ReciprocalSum::virial(const std::vector<double>& s, double charge_sum, double* w) const {
  const int64_t K = size();
  for (int a = 0; a < 9; ++a) w[a] = 0;
  // Under a strain ε, V grows by tr ε and k shrinks by εᵀk (k·r is kept): W = -∂E/∂ε.
  double diagonal = -background_coefficient(settings_) / volume_ * charge_sum * charge_sum;
  for (int64_t k = 0; k < K; ++k) {
    const double s2 = s[k] * s[k] + s[K + k] * s[K + k];
    diagonal += weight_[k] * s2;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) w[3 * a + b] += weight_slope_[k] * s2 * k_[3 * k + a] * k_[3 * k + b];
  }
  for (int a = 0; a < 3; ++a) w[4 * a] += diagonal;
}

namespace {

/// The smeared charges' kernel k_e erf(r w) / r (eV Å / e² per Å, w = 1/(√2 σ)) at distance r and
/// its derivative by r.
void smeared_kernel(double r, double width, double& kernel, double& slope) {
  kernel = kCoulomb * std::erf(r * width) / r;
  slope = kCoulomb * (2 / std::sqrt(M_PI) * width * std::exp(-r * r * width * width) - std::erf(r * width) / r) / r;
}

}  // namespace

void ReciprocalSum::atom_virials(const std::vector<double>& s, double charge_sum, int64_t n, const double* pos,
                                 const double* q, double* w) const {
  const int64_t K = size();
  const double background = background_coefficient(settings_) / volume_;
  for (int64_t i = 0; i < n; ++i) {
    const double* r = pos + 3 * i;
    double* wi = w + 9 * i;
    for (int a = 0; a < 9; ++a) wi[a] = 0;
    double diagonal = -background * charge_sum * q[i];
    for (int64_t k = 0; k < K; ++k) {
      const double kr = k_[3 * k] * r[0] + k_[3 * k + 1] * r[1] + k_[3 * k + 2] * r[2];
      const double share = q[i] * (std::cos(kr) * s[k] + std::sin(kr) * s[K + k]);  // its part of |S(k)|²
      diagonal += weight_[k] * share;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) wi[3 * a + b] += weight_slope_[k] * share * k_[3 * k + a] * k_[3 * k + b];
    }
    for (int a = 0; a < 3; ++a) wi[4 * a] += diagonal;
  }
}

double direct_sum_part(const LongRangeSettings& settings, int64_t n, const double* pos, const double* q, int64_t first,
                       int64_t count, double* potentials, double* forces, double* virials) {
  const double width = 1.0 / (std::sqrt(2.0) * settings.sigma);
  double energy = 0;
  for (int64_t a = 0; a < count; ++a) {
    const int64_t i = first + a;
    double phi = 0, force[3] = {0, 0, 0}, w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double d[3];
      for (int b = 0; b < 3; ++b) d[b] = pos[3 * j + b] - pos[3 * i + b];
      const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      double kernel, slope;
      smeared_kernel(r, width, kernel, slope);
      phi += q[j] * kernel;
      const double along = q[i] * q[j] * slope / r;  // dE/dd_ij = along * d
      for (int b = 0; b < 3; ++b) force[b] += along * d[b];
      for (int b = 0; b < 3; ++b)
        for (int c = 0; c < 3; ++c) w[3 * b + c] -= 0.5 * d[b] * along * d[c];
    }
    energy += 0.5 * q[i] * phi;
    if (potentials != nullptr) potentials[a] = phi;
    if (forces != nullptr)
      for (int b = 0; b < 3; ++b) forces[3 * a + b] = force[b];
    if (virials != nullptr)
      for (int b = 0; b < 9; ++b) virials[9 * a + b] = w[b];
  }
  return energy;
}

double direct_sum(const LongRangeSettings& settings, int64_t n, const double* pos, const double* q,
                  double* potentials, double* forces, double* virial) {
  const double width = 1.0 / (std::sqrt(2.0) * settings.sigma);
  if (potentials != nullptr)
    for (int64_t i = 0; i < n; ++i) potentials[i] = 0;
  if (forces != nullptr)
    for (int64_t i = 0; i < 3 * n; ++i) forces[i] = 0;
  if (virial != nullptr)
    for (int a = 0; a < 9; ++a) virial[a] = 0;
  double e = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) {
      double d[3];
      for (int b = 0; b < 3; ++b) d[b] = pos[3 * j + b] - pos[3 * i + b];
      const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
      double kernel, slope;
      smeared_kernel(r, width, kernel, slope);
      e += q[i] * q[j] * kernel;
      if (potentials != nullptr) {
        potentials[i] += q[j] * kernel;
        potentials[j] += q[i] * kernel;
      }
      const double along = q[i] * q[j] * slope / r;  // dE/dd = along * d
      if (forces != nullptr)
        for (int b = 0; b < 3; ++b) {
          forces[3 * i + b] += along * d[b];
          forces[3 * j + b] -= along * d[b];
        }
      if (virial != nullptr)
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) virial[3 * a + b] -= d[a] * along * d[b];
    }
  return e;
}

}  // namespace mlip::models
