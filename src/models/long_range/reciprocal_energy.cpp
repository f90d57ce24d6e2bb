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

/// Σ_i x_i (cos, sin)(k·r_i) per k-vector: [2, K] (the structure factor of the values x [N],
/// contiguous float64).
torch::Tensor structure_factor(const KSumTables& t, const torch::Tensor& x) {
  const int64_t N = t.cos_kr.size(0), K = t.size();
  torch::Tensor s = torch::zeros({2, K}, host_double());
  double* re = s.data_ptr<double>();
  double* im = re + K;
  const double* xx = x.data_ptr<double>();
  const double* co = t.cos_kr.data_ptr<double>();
  const double* si = t.sin_kr.data_ptr<double>();
  for (int64_t i = 0; i < N; ++i) {
    const double w = xx[i];
    const double* ci = co + i * K;
    const double* sn = si + i * K;
    for (int64_t k = 0; k < K; ++k) re[k] += w * ci[k], im[k] += w * sn[k];
  }
  return s;
}

/// The sweeps over atoms and k-vectors as two matrix products (BLAS):
/// out [N, C] = cos_kr [N, K] · u [K, C] + sin_kr [N, K] · v [K, C].
torch::Tensor sweep(const KSumTables& t, const torch::Tensor& u, const torch::Tensor& v) {
  return torch::mm(t.cos_kr, u).addmm_(t.sin_kr, v);
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
  s.total_charge = ctx->saved_data["total_charge"].toDouble();
  return s;
}

void save_settings(AutogradContext* ctx, const LongRangeSettings& s) {
  ctx->saved_data["sigma"] = s.sigma;
  ctx->saved_data["kspace_spacing"] = s.kspace_spacing;
  ctx->saved_data["total_charge"] = s.total_charge;
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

/// One frame's first derivatives at its charges q [N] (docs/long_range.md "The k-sum in training"),
/// written to phi [N] (the potentials ∂E/∂q), grad_pos [N, 3] (∂E/∂pos) and virial [9] (the
/// fixed-charge virial W, row-major). Plain loops but for the sweep (BLAS): a training step's
/// frames are small, and every tensor operation costs its dispatch.
void first_derivatives(const LongRangeSettings& settings, const KSumTables& t, const double* q, double* phi,
                       double* grad_pos, double* virial) {
  const int64_t K = t.size(), N = t.cos_kr.size(0);
  const double self = self_coefficient(settings), background = background_coefficient(settings) / t.volume;
  double charge = 0;
  for (int64_t i = 0; i < N; ++i) charge += q[i];
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
  const torch::Tensor swept = sweep(t, u, v);  // [N, 4]
  const double* r = swept.data_ptr<double>();
  for (int64_t i = 0; i < N; ++i) {
    phi[i] = 2 * r[4 * i] - 2 * self * q[i] - 2 * background * charge;
    for (int c = 0; c < 3; ++c) grad_pos[3 * i + c] = 2 * q[i] * r[4 * i + 1 + c];
  }
  // The fixed-charge virial W (docs/long_range.md "Forces and virial").
  for (int a = 0; a < 9; ++a) virial[a] = 0;
  double diagonal = -background * charge * charge;
  for (int64_t j = 0; j < K; ++j) {
    const double s2 = re[j] * re[j] + im[j] * im[j];
    diagonal += g[j] * s2;
    const double kk[3] = {k[j], k[K + j], k[2 * K + j]};
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) virial[3 * a + b] += sl[j] * s2 * kk[a] * kk[b];
  }
  for (int a = 0; a < 3; ++a) virial[4 * a] += diagonal;
}

/// ∂/∂q_i of Σ_j a_j φ_j + Σ_j b_j·∂E/∂r_j + m:W (docs/long_range.md "The k-sum in training"),
/// written to out [N]: q, a [N], b [N, 3], m [9] row-major.
void charge_gradient(const LongRangeSettings& settings, const KSumTables& t, const double* q, const double* a,
                     const double* b, const double* mm, double* out) {
  const int64_t K = t.size(), N = t.cos_kr.size(0);
  const double self = self_coefficient(settings), background = background_coefficient(settings) / t.volume;
  const double* k = t.k.data_ptr<double>();
  const double* g = t.weight.data_ptr<double>();
  const double* sl = t.slope.data_ptr<double>();
  const double* re = t.s.data_ptr<double>();
  const double* im = re + K;
  // Per k: A = Σ_j a_j e^{ik·r_j} (row 0) and Σ_j q_j b_jc e^{ik·r_j} (rows 1-3), whose sum with
  // k_c is P = Σ_j q_j (b_j·k) e^{ik·r_j}.
  torch::Tensor rows = torch::empty({4, N}, host_double());
  double* rw = rows.data_ptr<double>();
  double a_sum = 0, charge = 0;
  for (int64_t i = 0; i < N; ++i) {
    rw[i] = a[i];
    for (int c = 0; c < 3; ++c) rw[(1 + c) * N + i] = q[i] * b[3 * i + c];
    a_sum += a[i], charge += q[i];
  }
  const torch::Tensor by_cos = torch::mm(rows, t.cos_kr);  // [4, K]
  const torch::Tensor by_sin = torch::mm(rows, t.sin_kr);
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
  const torch::Tensor swept = sweep(t, u, v);  // [N, 4]: Σ_k of the X, Y part, then of the β part by b_ic
  const double* r = swept.data_ptr<double>();
  const double constant = -2 * background * a_sum - 2 * background * charge * trace;
  for (int64_t i = 0; i < N; ++i) {
    double x = 2 * r[4 * i] - 2 * self * a[i] + constant;
    for (int c = 0; c < 3; ++c) x += 2 * b[3 * i + c] * r[4 * i + 1 + c];
    out[i] = x;
  }
}

/// The energy of one frame's sum from its tables (the structure factor t.s filled), q [N].
double energy_of(const LongRangeSettings& settings, const KSumTables& t, const double* q) {
  const int64_t K = t.size(), N = t.cos_kr.size(0);
  const double* g = t.weight.data_ptr<double>();
  const double* re = t.s.data_ptr<double>();
  const double* im = re + K;
  double e = 0, charge = 0, square = 0;
  for (int64_t j = 0; j < K; ++j) e += g[j] * (re[j] * re[j] + im[j] * im[j]);
  for (int64_t i = 0; i < N; ++i) charge += q[i], square += q[i] * q[i];
  return e - self_coefficient(settings) * square - background_coefficient(settings) / t.volume * charge * charge;
}

/// A contiguous float64 host copy of `x` (undefined: `count` zeros), for the loops above.
torch::Tensor dense(const torch::Tensor& x, int64_t count) {
  return x.defined() ? x.to(torch::kFloat64).contiguous() : torch::zeros({count}, host_double());
}

/// The first derivatives ∂E/∂q [N] (the potentials φ), ∂E/∂pos [N, 3] and ∂E/∂cell [3, 3], with their
/// derivatives by q fused (docs/long_range.md "The k-sum in training").
class ReciprocalGradients : public torch::autograd::Function<ReciprocalGradients> {
 public:
  static variable_list forward(AutogradContext* ctx, const LongRangeSettings* settings, const KSumTables* tables,
                               const torch::Tensor& q, const torch::Tensor& pos, const torch::Tensor& cell) {
    const KSumTables& t = *tables;
    const int64_t N = q.size(0);
    torch::Tensor phi = torch::empty({N}, host_double()), grad_pos = torch::empty({N, 3}, host_double());
    std::array<double, 9> w{};
    first_derivatives(*settings, t, q.data_ptr<double>(), phi.data_ptr<double>(), grad_pos.data_ptr<double>(),
                      w.data());
    // ∂E/∂cell = -cell⁻ᵀ (W + posᵀ ∂E/∂pos) (a strain moves positions and cell together).
    const torch::Tensor inverse = torch::from_blob(inverse_of(*settings, cell).data(), {3, 3}, host_double()).clone();
    const torch::Tensor grad_cell =
        -torch::matmul(inverse.transpose(0, 1), torch::from_blob(w.data(), {3, 3}, host_double()) +
                                                    torch::matmul(pos.transpose(0, 1), grad_pos));
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
    if (!ctx->needs_input_grad(0)) return out;
    const int64_t N = q.size(0);
    const torch::Tensor a = dense(incoming[0], N);
    torch::Tensor b = incoming[1].defined() ? incoming[1].to(torch::kFloat64) : torch::zeros({N, 3}, host_double());
    // c:∂E/∂cell = m:(W + posᵀ ∂E/∂pos) with m = -cell⁻¹ c: m for W, and pos m more for ∂E/∂pos.
    torch::Tensor m = torch::zeros({3, 3}, host_double());
    if (incoming[2].defined()) {
      m = -torch::matmul(ctx->saved_data["inverse"].toTensor(), incoming[2]);
      b = b + torch::matmul(pos, m);
    }
    b = b.contiguous(), m = m.contiguous();
    torch::Tensor by_q = torch::empty({N}, host_double());
    charge_gradient(settings, t, q.data_ptr<double>(), a.data_ptr<double>(), b.data_ptr<double>(),
                    m.data_ptr<double>(), by_q.data_ptr<double>());
    out[2] = by_q;
    return out;
  }
};

/// The long-range term of a batch of periodic host frames from the raw charges (docs/long_range.md
/// "The k-sum in training"): energies, charges, the seeds ∂E/∂q̃, the fixed-charge forces and virials,
/// each frame by its fused sum; differentiable in the raw charges (what a training loss asks for).
class ReciprocalBatch : public torch::autograd::Function<ReciprocalBatch> {
 public:
  static variable_list forward(AutogradContext* ctx, const LongRangeSettings* settings, const torch::Tensor& raw,
                               const torch::Tensor& pos, const torch::Tensor& cell) {
    const int64_t B = raw.size(0), N = raw.size(1);
    torch::Tensor energy = torch::empty({B}, host_double()), charges = torch::empty({B, N}, host_double());
    torch::Tensor seeds = torch::empty({B, N}, host_double()), phi = torch::empty({B, N}, host_double());
    torch::Tensor forces = torch::empty({B, N, 3}, host_double()), virial = torch::empty({B, 3, 3}, host_double());
    const double* raw_q = raw.data_ptr<double>();
    double* q_all = charges.data_ptr<double>();
    double* seed_all = seeds.data_ptr<double>();
    double* phi_all = phi.data_ptr<double>();
    double* force_all = forces.data_ptr<double>();
    std::vector<torch::Tensor> tables;
    std::vector<double> volumes;
    for (int64_t f = 0; f < B; ++f) {
      // The shift to the total charge: q = q̃ - (Σ q̃ - Q) / N.
      double* q = q_all + f * N;
      double sum = 0;
      for (int64_t i = 0; i < N; ++i) sum += raw_q[f * N + i];
      const double shift = N > 0 ? (sum - settings->total_charge) / double(N) : 0.0;
      for (int64_t i = 0; i < N; ++i) q[i] = raw_q[f * N + i] - shift;
      KSumTables t = tables_of(*settings, pos[f], cell[f]);
      t.s = structure_factor(t, charges[f]);
      energy.data_ptr<double>()[f] = energy_of(*settings, t, q);
      double* p = phi_all + f * N;
      double* F = force_all + f * N * 3;
      first_derivatives(*settings, t, q, p, F, virial.data_ptr<double>() + 9 * f);
      double mean = 0;
      for (int64_t i = 0; i < N; ++i) mean += p[i] / double(N);
      for (int64_t i = 0; i < N; ++i) seed_all[f * N + i] = p[i] - mean;
      for (int64_t x = 0; x < 3 * N; ++x) F[x] = -F[x];  // forces = -∂E/∂pos
      for (const torch::Tensor& x : t.list()) tables.push_back(x);
      volumes.push_back(t.volume);
    }
    save_settings(ctx, *settings);
    ctx->saved_data["tables"] = tables;
    ctx->saved_data["volumes"] = volumes;
    ctx->saved_data["phi"] = phi;
    // Not the output itself: an output kept in its own node's data would keep the node alive.
    ctx->saved_data["charges"] = charges.detach();
    return {energy, charges, seeds, forces, virial};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (torch::GradMode::is_enabled())
      throw Error("reciprocal_batch: derivatives of the first order by the charges; a second was asked for");
    const LongRangeSettings settings = settings_from(ctx);
    const auto tables = ctx->saved_data["tables"].toTensorVector();
    const auto volumes = ctx->saved_data["volumes"].toDoubleVector();
    const torch::Tensor phi = ctx->saved_data["phi"].toTensor(), charges = ctx->saved_data["charges"].toTensor();
    const int64_t B = charges.size(0), N = charges.size(1);
    // The incoming gradients: energy [B], charges [B, N], seeds [B, N], forces [B, N, 3], virial [B, 3, 3].
    const torch::Tensor g_energy = dense(grads[0], B), g_charges = dense(grads[1], B * N),
                        g_seeds = dense(grads[2], B * N), g_forces = dense(grads[3], B * N * 3),
                        g_virial = dense(grads[4], B * 9);
    torch::Tensor by_raw = torch::empty({B, N}, host_double());
    std::vector<double> a(static_cast<size_t>(N)), b(static_cast<size_t>(3 * N)), m(9);
    for (int64_t f = 0; f < B; ++f) {
      const KSumTables t = KSumTables::from(
          std::vector<torch::Tensor>(tables.begin() + 7 * f, tables.begin() + 7 * (f + 1)), volumes[size_t(f)]);
      // Σ g_seed·(φ - mean φ) = Σ (g_seed - mean g_seed)·φ; forces = -∂E/∂pos; the virial is W.
      const double* gs = g_seeds.data_ptr<double>() + f * N;
      double mean = 0;
      for (int64_t i = 0; i < N; ++i) mean += gs[i] / double(N);
      for (int64_t i = 0; i < N; ++i) a[size_t(i)] = gs[i] - mean;
      const double* gf = g_forces.data_ptr<double>() + f * N * 3;
      for (int64_t x = 0; x < 3 * N; ++x) b[size_t(x)] = -gf[x];
      for (int x = 0; x < 9; ++x) m[size_t(x)] = g_virial.data_ptr<double>()[9 * f + x];
      double* out = by_raw.data_ptr<double>() + f * N;
      charge_gradient(settings, t, charges.data_ptr<double>() + f * N, a.data(), b.data(), m.data(), out);
      // The energy's own term, the charges' gradient, then through the shift (the mean taken off).
      const double ge = g_energy.data_ptr<double>()[f];
      const double* p = phi.data_ptr<double>() + f * N;
      const double* gq = g_charges.data_ptr<double>() + f * N;
      double total = 0;
      for (int64_t i = 0; i < N; ++i) out[i] += ge * p[i] + gq[i], total += out[i];
      for (int64_t i = 0; i < N; ++i) out[i] -= total / double(N);
    }
    return {torch::Tensor(), by_raw, torch::Tensor(), torch::Tensor()};
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
    const double energy = energy_of(*settings, t, q.data_ptr<double>());
    save_settings(ctx, *settings);
    ctx->saved_data["tables"] = t.list();
    ctx->saved_data["volume"] = t.volume;
    ctx->save_for_backward({q, pos, cell});
    return torch::full({}, energy, host_double());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // A training step differentiates E twice: once for the forces (keeping the graph), once more
    // as the loss's energy term. The first call's derivatives (unscaled) are kept for the second:
    // the same functions of the same inputs (docs/long_range.md "The k-sum in training").
    variable_list first;
    if (ctx->saved_data.count("first")) {
      first = ctx->saved_data["first"].toTensorVector();
    } else {
      const LongRangeSettings settings = settings_from(ctx);
      const KSumTables t =
          KSumTables::from(ctx->saved_data["tables"].toTensorVector(), ctx->saved_data["volume"].toDouble());
      const auto saved = ctx->get_saved_variables();
      first = ReciprocalGradients::apply(&settings, &t, saved[0], saved[1], saved[2]);
      // Kept only with their graph (a call that creates one), so that any later call may reuse them.
      if (torch::GradMode::is_enabled()) ctx->saved_data["first"] = first;
    }
    const torch::Tensor& scale = grads[0];
    // Only what is asked for (needs_input_grad counts the tensor inputs: q 0, pos 1, cell 2). A
    // training step's gradient of the energies' sum seeds 1: no product to record then.
    const bool unit = !scale.requires_grad() && scale.item<double>() == 1.0;
    variable_list out = {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    for (size_t a = 0; a < 3; ++a)
      if (ctx->needs_input_grad(a)) out[a + 1] = unit ? first[a] : scale * first[a];
    return out;
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

ReciprocalBatchTerms reciprocal_batch(const LongRangeSettings& settings, const torch::Tensor& raw_charges,
                                      const torch::Tensor& pos, const torch::Tensor& cell) {
  const int64_t B = raw_charges.defined() && raw_charges.dim() == 2 ? raw_charges.size(0) : -1;
  const int64_t N = B >= 0 ? raw_charges.size(1) : -1;
  check_input(raw_charges, "raw charges", {B, N});
  check_input(pos, "pos", {B, N, 3});
  check_input(cell, "cell", {B, 3, 3});
  const auto out = ReciprocalBatch::apply(&settings, raw_charges.contiguous(), pos.detach().contiguous(),
                                          cell.detach().contiguous());
  return {out[0], out[1], out[2], out[3], out[4]};
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
