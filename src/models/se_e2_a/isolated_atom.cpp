#include "models/se_e2_a/isolated_atom.h"

#include <algorithm>

#include "models/kernels/gemm.h"

namespace mlip::models {

template <typename R>
IsolatedAtomFit<R>::IsolatedAtomFit(const SeAConfig& config, const std::vector<Layer>& fit_layers)
    : config_(config),
      nt_(int64_t(config.type_map.size())),
      m_(config.neuron.back()),
      ms_(config.axis_neuron) {
  for (int64_t t = 0; t < nt_; ++t) {
    fit_.emplace_back(fit_layers);
    index_.push_back(t);
  }
}

template <typename R>
void IsolatedAtomFit<R>::forward(const std::vector<typename FittingAdjoint<R>::Params>& params,
                                 const std::vector<double>& e0, const std::vector<std::vector<const R*>>& empty,
                                 const std::vector<bool>& used) {
  const int64_t m = m_, ms = ms_;
  const R inv_nc = R(1) / R(config_.nslots());
  used_ = used;
  e0_ = e0;
  t_.assign(size_t(nt_ * 4 * m), R(0));
  d_.assign(size_t(nt_ * m * ms), R(0));
  energy_.assign(size_t(nt_), R(0));
  dedx_.assign(size_t(nt_ * m * ms), R(0));
  for (int64_t t = 0; t < nt_; ++t) {
    if (!used_[size_t(t)]) continue;
    // T = (1/N_c) sum over neighbour types of sel[u] * s_empty * G(s_empty) in row 0.
    R* row = t_.data() + t * 4 * m;
    for (int64_t u = 0; u < nt_; ++u) {
      if (config_.sel[size_t(u)] == 0) continue;
      const R* g = empty[size_t(t)][size_t(u)];
      const R f = R(double(config_.sel[size_t(u)]) * e0[size_t(t)]);
      for (int64_t k = 0; k < m; ++k) row[k] += f * g[k];
    }
    for (int64_t k = 0; k < 4 * m; ++k) row[k] *= inv_nc;
    gemm<R>(true, false, m, ms, 4, R(1), row, m, row, m, R(0), d_.data() + t * m * ms, ms);
    fit_[size_t(t)].forward(params[size_t(t)], d_.data(), &index_[size_t(t)], 1, energy_.data(), dedx_.data());
  }
}

template <typename R>
std::vector<std::vector<std::vector<R>>> IsolatedAtomFit<R>::backward(const std::vector<R>& energy_bar) {
  const int64_t m = m_, ms = ms_;
  const R inv_nc = R(1) / R(config_.nslots());
  std::vector<std::vector<std::vector<R>>> out(static_cast<size_t>(nt_), std::vector<std::vector<R>>(static_cast<size_t>(nt_)));
  // dE/dD does not depend on the positions, so d loss / d(dE/dD) is zero.
  const std::vector<R> gbar(static_cast<size_t>(nt_ * m * ms), R(0));
  std::vector<R> ebar(static_cast<size_t>(nt_), R(0)), dbar(static_cast<size_t>(nt_ * m * ms), R(0)), tbar(static_cast<size_t>(m));
  for (int64_t t = 0; t < nt_; ++t) {
    if (!used_[size_t(t)]) continue;
    ebar[size_t(t)] = energy_bar[size_t(t)];
    fit_[size_t(t)].backward(gbar.data(), ebar.data(), dbar.data());
    // Through D = T^T T< with only row 0 of T non-zero: Tbar_0[a] = sum_b T_0[b] X[a, b] + [a < M<] sum_a' T_0[a'] X[a', a].
    const R* x = dbar.data() + t * m * ms;
    const R* t0 = t_.data() + t * 4 * m;
    for (int64_t a = 0; a < m; ++a) {
      R v = 0;
      for (int64_t b = 0; b < ms; ++b) v += t0[b] * x[a * ms + b];
      tbar[size_t(a)] = v;
    }
    for (int64_t b = 0; b < ms; ++b) {
      R v = 0;
      for (int64_t a = 0; a < m; ++a) v += t0[a] * x[a * ms + b];
      tbar[size_t(b)] += v;
    }
    for (int64_t u = 0; u < nt_; ++u) {
      if (config_.sel[size_t(u)] == 0) continue;
      const R f = R(double(config_.sel[size_t(u)]) * e0_[size_t(t)]) * inv_nc;
      auto& g = out[size_t(t)][size_t(u)];
      g.resize(size_t(m));
      for (int64_t k = 0; k < m; ++k) g[size_t(k)] = f * tbar[size_t(k)];
    }
  }
  return out;
}

template class IsolatedAtomFit<float>;
template class IsolatedAtomFit<double>;

}  // namespace mlip::models
