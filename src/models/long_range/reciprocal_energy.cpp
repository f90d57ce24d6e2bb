#include "models/long_range/reciprocal_energy.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "error.h"
#include "models/long_range/ewald.h"

namespace mlip::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// One frame's k-vectors and phases (docs/long_range.md "The k-sum in training"), host float64
/// tensors, made once in the energy's forward and read by both derivatives.
struct KSumTables {
  torch::Tensor k;        ///< [3, K] 1/Å: rows k_x, k_y, k_z
  torch::Tensor n_int;    ///< [K, 3] float64: the integer vectors (for the operations' fallback)
  torch::Tensor weight;   ///< [K] eV Å: g(k), one of each ±k pair
  torch::Tensor slope;    ///< [K]: dg/d|k| / |k|
  torch::Tensor cos_kr;   ///< [N, K]
  torch::Tensor sin_kr;   ///< [N, K]
  torch::Tensor s;        ///< [2, K]: Re S(k), Im S(k) of the charges
  double volume = 0;      ///< Å³

  std::vector<torch::Tensor> list() const { return {k, n_int, weight, slope, cos_kr, sin_kr, s}; }
  static KSumTables from(const std::vector<torch::Tensor>& t, double volume) {
    return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], volume};
  }
  int64_t size() const { return weight.size(0); }
};

torch::TensorOptions host_double() { return torch::TensorOptions().dtype(torch::kFloat64); }

/// A run of k-vectors j0 .. j0 + length - 1 with the same n_0, n_1 and n_2 = first_n2, first_n2 + 1, ...
/// (ReciprocalSum lists them so: n_2 innermost, and a sphere cuts a line in one piece).
struct Run {
  int64_t j0, length, n0, n1, first_n2;
};

std::vector<Run> runs_of(const std::vector<int64_t>& n, int64_t K) {
  std::vector<Run> runs;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t* v = n.data() + 3 * j;
    if (!runs.empty()) {
      Run& last = runs.back();
      if (last.n0 == v[0] && last.n1 == v[1] && last.first_n2 + last.length == v[2]) {
        ++last.length;
        continue;
      }
    }
    runs.push_back({j, 1, v[0], v[1], v[2]});
  }
  return runs;
}

/// The k-vectors of the cell and every atom's e^{ik·r}. With fractional coordinates f = r cell⁻¹,
/// k·r = 2π n·f, so e^{ik·r} is the product of three factors e^{2πi n_a f_a}, each taken from a
/// per-atom table of the powers of e^{2πi f_a} (one sine and cosine an axis, the rest products):
/// along a run of n_2 the products are one vectorisable loop.
KSumTables tables_of(const LongRangeSettings& settings, const torch::Tensor& pos, const torch::Tensor& cell) {
  const double* c = cell.data_ptr<double>();
  const ReciprocalSum sum(settings, c);
  const ReciprocalCell reciprocal(settings, c);
  const int64_t K = sum.size(), N = pos.size(0);
  KSumTables t;
  t.volume = sum.volume();
  t.k = torch::empty({3, K}, host_double());
  t.n_int = torch::empty({K, 3}, host_double());
  t.weight = torch::from_blob(const_cast<double*>(sum.weights().data()), {K}, host_double()).clone();
  t.slope = torch::from_blob(const_cast<double*>(sum.weight_slopes().data()), {K}, host_double()).clone();
  double* k = t.k.data_ptr<double>();
  double* n_int = t.n_int.data_ptr<double>();
  const auto& kv = sum.k_vectors();
  const auto& nv = sum.integer_vectors();
  for (int64_t j = 0; j < K; ++j)
    for (int a = 0; a < 3; ++a) {
      k[a * K + j] = kv[size_t(3 * j + a)];
      n_int[3 * j + a] = double(nv[size_t(3 * j + a)]);
    }
  t.cos_kr = torch::empty({N, K}, host_double());
  t.sin_kr = torch::empty({N, K}, host_double());
  const std::vector<Run> runs = runs_of(nv, K);
  const int64_t* reach = sum.reach();
  const double* r = pos.data_ptr<double>();
  double* co = t.cos_kr.data_ptr<double>();
  double* si = t.sin_kr.data_ptr<double>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> table_cos[3], table_sin[3];  // e^{2πi m f_a}, m = -reach_a .. reach_a
    for (int a = 0; a < 3; ++a) table_cos[a].resize(size_t(2 * reach[a] + 1)), table_sin[a].resize(size_t(2 * reach[a] + 1));
    for (int64_t i = begin; i < end; ++i) {
      for (int a = 0; a < 3; ++a) {
        const double f = r[3 * i] * reciprocal.inverse[a] + r[3 * i + 1] * reciprocal.inverse[3 + a] +
                         r[3 * i + 2] * reciprocal.inverse[6 + a];
        const double step_cos = std::cos(2 * M_PI * f), step_sin = std::sin(2 * M_PI * f);
        double* tc = table_cos[a].data() + reach[a];  // tc[m], m = -reach .. reach
        double* ts = table_sin[a].data() + reach[a];
        tc[0] = 1, ts[0] = 0;
        for (int64_t m = 1; m <= reach[a]; ++m) {
          tc[m] = tc[m - 1] * step_cos - ts[m - 1] * step_sin;
          ts[m] = ts[m - 1] * step_cos + tc[m - 1] * step_sin;
          tc[-m] = tc[m], ts[-m] = -ts[m];
        }
      }
      double* ci = co + i * K;
      double* sn = si + i * K;
      for (const Run& run : runs) {
        const size_t m0 = size_t(run.n0 + reach[0]), m1 = size_t(run.n1 + reach[1]);
        const double c01 = table_cos[0][m0] * table_cos[1][m1] - table_sin[0][m0] * table_sin[1][m1];
        const double s01 = table_sin[0][m0] * table_cos[1][m1] + table_cos[0][m0] * table_sin[1][m1];
        const double* cz = table_cos[2].data() + (run.first_n2 + reach[2]);
        const double* sz = table_sin[2].data() + (run.first_n2 + reach[2]);
        double* out_cos = ci + run.j0;
        double* out_sin = sn + run.j0;
        for (int64_t x = 0; x < run.length; ++x) {
          out_cos[x] = c01 * cz[x] - s01 * sz[x];
          out_sin[x] = s01 * cz[x] + c01 * sz[x];
        }
      }
    }
  });
  return t;
}

/// Σ_i x_i (cos, sin)(k·r_i) per k-vector: [2, K] (the structure factor of the values x [N]).
torch::Tensor structure_factor(const KSumTables& t, const torch::Tensor& x) {
  return torch::stack({torch::matmul(x, t.cos_kr), torch::matmul(x, t.sin_kr)});
}

/// The sweeps over atoms and k-vectors as two matrix products (BLAS):
/// out [N, C] = cos_kr [N, K] · u [K, C] + sin_kr [N, K] · v [K, C].
torch::Tensor sweep(const KSumTables& t, const torch::Tensor& u, const torch::Tensor& v) {
  return torch::addmm(torch::matmul(t.cos_kr, u), t.sin_kr, v);
}

/// cell⁻¹ [9] row-major of a host cell [3, 3].
std::array<double, 9> inverse_of(const LongRangeSettings& settings, const torch::Tensor& cell) {
  const ReciprocalCell reciprocal(settings, cell.data_ptr<double>());
  std::array<double, 9> out{};
  for (int a = 0; a < 9; ++a) out[size_t(a)] = reciprocal.inverse[a];
  return out;
}

LongRangeSettings settings_from(AutogradContext* ctx) {
  LongRangeSettings s;
  s.enabled = true;
  s.sigma = ctx->saved_data["sigma"].toDouble();
  s.kspace_spacing = ctx->saved_data["kspace_spacing"].toDouble();
  return s;
}

void save_settings(AutogradContext* ctx, const LongRangeSettings& s) {
  ctx->saved_data["sigma"] = s.sigma;
  ctx->saved_data["kspace_spacing"] = s.kspace_spacing;
}

/// The derivatives' vector-Jacobian products by the operations: given the first derivatives'
/// incoming gradients (a for ∂E/∂q [N], b for ∂E/∂pos [N, 3], c for ∂E/∂cell [3, 3]; undefined:
/// zero), the gradients of Σ a·∂E/∂q + Σ b·∂E/∂pos + Σ c·∂E/∂cell by q, pos and cell (no graph: one
/// of its own, of fresh leaves, so that autograd does not enter the node that asks).
variable_list second_by_operations(const LongRangeSettings& settings, const torch::Tensor& n_int,
                                   const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell,
                                   const variable_list& incoming) {
  torch::AutoGradMode grad_on(true);
  const variable_list leaves = {q.detach().requires_grad_(true), pos.detach().requires_grad_(true),
                                cell.detach().requires_grad_(true)};
  const torch::Tensor e = reciprocal_energy_by_operations(settings, n_int, leaves[0], leaves[1], leaves[2]);
  const auto first = torch::autograd::grad({e}, leaves, {}, true, true, true);
  torch::Tensor loss = torch::zeros({}, host_double());
  for (size_t a = 0; a < 3; ++a)
    if (incoming[a].defined() && first[a].defined()) loss = loss + (incoming[a].detach() * first[a]).sum();
  if (!loss.requires_grad()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  return torch::autograd::grad({loss}, leaves, {}, false, false, true);
}

/// The first derivatives ∂E/∂q [N] (the potentials φ), ∂E/∂pos [N, 3] and ∂E/∂cell [3, 3], with their
/// derivatives by q fused (docs/long_range.md "The k-sum in training").
class ReciprocalGradients : public torch::autograd::Function<ReciprocalGradients> {
 public:
  static variable_list forward(AutogradContext* ctx, const LongRangeSettings* settings, const KSumTables* tables,
                               const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell) {
    const KSumTables& t = *tables;
    const int64_t K = t.size();
    const double self = self_coefficient(*settings), background = background_coefficient(*settings) / t.volume;
    const double charge = q.sum().item<double>();
    const double* k = t.k.data_ptr<double>();
    const double* g = t.weight.data_ptr<double>();
    const double* sl = t.slope.data_ptr<double>();
    const double* re = t.s.data_ptr<double>();
    const double* im = re + K;
    // φ_i = 2 Σ_k g (cos S_re + sin S_im) - 2 self q_i - 2 (bg/V) Q;
    // ∂E/∂r_i = 2 q_i Σ_k g (cos S_im - sin S_re) k.
    torch::Tensor u = torch::empty({K, 4}, host_double()), v = torch::empty({K, 4}, host_double());
    double* uu = u.data_ptr<double>();
    double* vv = v.data_ptr<double>();
    for (int64_t j = 0; j < K; ++j) {
      const double g_re = g[j] * re[j], g_im = g[j] * im[j];
      uu[4 * j] = g_re, vv[4 * j] = g_im;
      for (int c = 0; c < 3; ++c) uu[4 * j + 1 + c] = g_im * k[c * K + j], vv[4 * j + 1 + c] = -g_re * k[c * K + j];
    }
    const torch::Tensor r = 2 * sweep(t, u, v);
    const torch::Tensor phi = r.select(1, 0) - 2 * self * q - 2 * background * charge;
    const torch::Tensor grad_pos = q.unsqueeze(1) * r.narrow(1, 1, 3);
    // The fixed-charge virial W (docs/long_range.md "Forces and virial"), then
    // ∂E/∂cell = -cell⁻ᵀ (W + posᵀ ∂E/∂pos) (a strain moves positions and cell together).
    std::array<double, 9> w{};
    double diagonal = -background * charge * charge;
    for (int64_t j = 0; j < K; ++j) {
      const double s2 = re[j] * re[j] + im[j] * im[j];
      diagonal += g[j] * s2;
      const double kk[3] = {k[j], k[K + j], k[2 * K + j]};
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) w[size_t(3 * a + b)] += sl[j] * s2 * kk[a] * kk[b];
    }
    for (int a = 0; a < 3; ++a) w[size_t(4 * a)] += diagonal;
    const torch::Tensor inverse = torch::from_blob(inverse_of(*settings, cell).data(), {3, 3}, host_double()).clone();
    const torch::Tensor grad_cell =
        -torch::matmul(inverse.transpose(0, 1),
                       torch::from_blob(w.data(), {3, 3}, host_double()) + torch::matmul(pos.transpose(0, 1), grad_pos));
    save_settings(ctx, *settings);
    ctx->saved_data["tables"] = t.list();
    ctx->saved_data["volume"] = t.volume;
    ctx->saved_data["inverse"] = inverse;
    ctx->save_for_backward({q, pos, cell});
    return {phi, grad_pos, grad_cell};
  }

  static variable_list backward(AutogradContext* ctx, variable_list incoming) {
    if (torch::GradMode::is_enabled())
      throw Error("reciprocal_energy: derivatives up to the second order; a third was asked for");
    const LongRangeSettings settings = settings_from(ctx);
    const KSumTables t = KSumTables::from(ctx->saved_data["tables"].toTensorVector(), ctx->saved_data["volume"].toDouble());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &pos = saved[1], &cell = saved[2];
    variable_list out(5);  // settings, tables, q, pos, cell
    // By pos and cell (a training loss asks for neither): the operations. (needs_input_grad counts
    // the tensor inputs only: q 0, pos 1, cell 2.)
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      const auto by_ops = second_by_operations(settings, t.n_int, q, pos, cell, incoming);
      for (int a = 0; a < 3; ++a)
        if (ctx->needs_input_grad(size_t(a))) out[size_t(2 + a)] = by_ops[size_t(a)];
      return out;
    }
    if (ctx->needs_input_grad(0)) out[2] = charge_gradient(settings, t, ctx->saved_data["inverse"].toTensor(), q, pos, incoming);
    return out;
  }

 private:
  /// ∂/∂q_i of Σ_j a_j φ_j + Σ_j b_j·∂E/∂r_j + c:∂E/∂cell (docs/long_range.md "The k-sum in training").
  static torch::Tensor charge_gradient(const LongRangeSettings& settings, const KSumTables& t,
                                       const torch::Tensor& inverse, const torch::Tensor& q, const torch::Tensor& pos,
                                       const variable_list& incoming) {
    const int64_t N = q.size(0), K = t.size();
    const double self = self_coefficient(settings), background = background_coefficient(settings) / t.volume;
    const torch::Tensor a = incoming[0].defined() ? incoming[0] : torch::zeros({N}, host_double());
    torch::Tensor b = incoming[1].defined() ? incoming[1] : torch::zeros({N, 3}, host_double());
    // c:∂E/∂cell = -m:(W + posᵀ ∂E/∂pos) with m = cell⁻¹ c: a gradient -m for W and -pos m more for ∂E/∂pos.
    torch::Tensor m = torch::zeros({3, 3}, host_double());
    if (incoming[2].defined()) {
      m = -torch::matmul(inverse, incoming[2]);
      b = b + torch::matmul(pos, m);
    }
    b = b.contiguous();
    const torch::Tensor m_host = m.contiguous();
    const double* mm = m_host.data_ptr<double>();
    const double* k = t.k.data_ptr<double>();
    const double* g = t.weight.data_ptr<double>();
    const double* sl = t.slope.data_ptr<double>();
    const double* re = t.s.data_ptr<double>();
    const double* im = re + K;
    // Per k: A = Σ_j a_j e^{ik·r_j} (row 0) and Σ_j q_j b_jc e^{ik·r_j} (rows 1-3), whose sum with
    // k_c is P = Σ_j q_j (b_j·k) e^{ik·r_j}.
    const torch::Tensor rows = torch::cat({a.unsqueeze(0), (q.unsqueeze(1) * b).transpose(0, 1)}).contiguous();
    const torch::Tensor by_cos = torch::matmul(rows, t.cos_kr).contiguous();  // [4, K]
    const torch::Tensor by_sin = torch::matmul(rows, t.sin_kr).contiguous();
    const double* bc = by_cos.data_ptr<double>();
    const double* bs = by_sin.data_ptr<double>();
    // ∂/∂q_i = 2 Σ_k [cos(k·r_i) (X_k + β_ik g S_im) + sin(k·r_i) (Y_k − β_ik g S_re)] + constants,
    // β_ik = b_i·k, X = g (A_re − P_im) + u S_re, Y = g (A_im + P_re) + u S_im, u = slope kᵀmk + g tr m.
    const double trace = mm[0] + mm[4] + mm[8];
    torch::Tensor u = torch::empty({K, 4}, host_double()), v = torch::empty({K, 4}, host_double());
    double* uu = u.data_ptr<double>();
    double* vv = v.data_ptr<double>();
    for (int64_t j = 0; j < K; ++j) {
      const double kk[3] = {k[j], k[K + j], k[2 * K + j]};
      double kmk = 0, p_re = 0, p_im = 0;
      for (int c = 0; c < 3; ++c) {
        p_re += kk[c] * bc[(1 + c) * K + j], p_im += kk[c] * bs[(1 + c) * K + j];
        for (int d = 0; d < 3; ++d) kmk += kk[c] * mm[3 * c + d] * kk[d];
      }
      const double weight = sl[j] * kmk + g[j] * trace;
      uu[4 * j] = g[j] * (bc[j] - p_im) + weight * re[j];
      vv[4 * j] = g[j] * (bs[j] + p_re) + weight * im[j];
      for (int c = 0; c < 3; ++c) uu[4 * j + 1 + c] = g[j] * im[j] * kk[c], vv[4 * j + 1 + c] = -g[j] * re[j] * kk[c];
    }
    const torch::Tensor r = 2 * sweep(t, u, v);  // [N, 4]: Σ_k of the X, Y part, then of the β part by b_ic
    const double a_sum = a.sum().item<double>(), charge = q.sum().item<double>();
    return r.select(1, 0) + (b * r.narrow(1, 1, 3)).sum(1) - 2 * self * a - 2 * background * a_sum -
           2 * background * charge * trace;
  }
};

/// E(q, pos, cell) for one periodic frame; its backward gives ∂E/∂q, ∂E/∂pos and ∂E/∂cell through
/// ReciprocalGradients (so that they can be differentiated again).
class ReciprocalEnergy : public torch::autograd::Function<ReciprocalEnergy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const LongRangeSettings* settings, const torch::Tensor& q,
                               const torch::Tensor& pos, const torch::Tensor& cell) {
    KSumTables t = tables_of(*settings, pos, cell);
    t.s = structure_factor(t, q);
    const torch::Tensor squares = t.s * t.s;
    const double charge = q.sum().item<double>(), square = (q * q).sum().item<double>();
    const double energy = (t.weight * (squares[0] + squares[1])).sum().item<double>() -
                          self_coefficient(*settings) * square -
                          background_coefficient(*settings) / t.volume * charge * charge;
    save_settings(ctx, *settings);
    ctx->saved_data["tables"] = t.list();
    ctx->saved_data["volume"] = t.volume;
    ctx->save_for_backward({q, pos, cell});
    return torch::full({}, energy, host_double());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const LongRangeSettings settings = settings_from(ctx);
    const KSumTables t = KSumTables::from(ctx->saved_data["tables"].toTensorVector(), ctx->saved_data["volume"].toDouble());
    const auto saved = ctx->get_saved_variables();
    auto first = ReciprocalGradients::apply(&settings, &t, saved[0], saved[1], saved[2]);
    const torch::Tensor& scale = grads[0];
    // A training step's gradient of the energies' sum seeds 1: no product to record then.
    if (scale.requires_grad() || scale.item<double>() != 1.0)
      for (auto& x : first) x = scale * x;
    return {torch::Tensor(), first[0], first[1], first[2]};
  }
};

/// Throws mlip::Error unless `t` is a float64 host tensor of `shape`.
void check_input(const torch::Tensor& t, const char* name, const std::vector<int64_t>& shape) {
  if (!t.defined() || t.scalar_type() != torch::kFloat64 || !t.device().is_cpu() || t.sizes() != shape)
    throw Error(std::string("reciprocal_energy: ") + name + ": expected a float64 tensor on the CPU of shape " +
                c10::str(c10::IntArrayRef(shape)) + ", got " +
                (t.defined() ? c10::str(t.scalar_type(), " on ", t.device(), " of shape ", t.sizes()) : "none"));
}

}  // namespace

torch::Tensor reciprocal_energy(const LongRangeSettings& settings, const torch::Tensor& q, const torch::Tensor& pos,
                                const torch::Tensor& cell) {
  check_input(q, "q", {q.defined() && q.dim() == 1 ? q.size(0) : -1});
  check_input(pos, "pos", {q.size(0), 3});
  check_input(cell, "cell", {3, 3});
  return ReciprocalEnergy::apply(&settings, q.contiguous(), pos.contiguous(), cell.contiguous());
}

torch::Tensor reciprocal_energy_by_operations(const LongRangeSettings& settings, const torch::Tensor& n_int,
                                              const torch::Tensor& q, const torch::Tensor& pos,
                                              const torch::Tensor& cell) {
  const double k_max = settings.k_max(), k_end = settings.k_end();
  const torch::Tensor k = (2 * M_PI) * torch::matmul(n_int.to(cell.device()), torch::inverse(cell).transpose(0, 1));
  const torch::Tensor k2 = (k * k).sum(1);
  const torch::Tensor t = torch::clamp((torch::sqrt(k2) - k_max) / (k_end - k_max), 0.0, 1.0);
  const torch::Tensor taper = 1.0 - t * t * t * (10.0 - 15.0 * t + 6.0 * t * t);
  const torch::Tensor volume = torch::abs(torch::det(cell));
  const torch::Tensor g =
      (4 * M_PI * kCoulomb) / volume * taper * torch::exp(-0.5 * settings.sigma * settings.sigma * k2) / k2;
  const torch::Tensor kr = torch::matmul(pos, k.transpose(0, 1));
  const torch::Tensor s_re = torch::matmul(q, torch::cos(kr)), s_im = torch::matmul(q, torch::sin(kr));
  return (g * (s_re * s_re + s_im * s_im)).sum() - self_coefficient(settings) * (q * q).sum() -
         background_coefficient(settings) / volume * q.sum() * q.sum();
}

}  // namespace mlip::models
