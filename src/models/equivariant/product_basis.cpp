#include "models/equivariant/product_basis.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <string>

#include "error.h"
#include "models/equivariant/grouped_terms.h"
#include "models/equivariant/host_coupling.h"
#include "models/equivariant/product_rule.h"
#include "models/kernels/channel_chunk.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/target_clones.h"

#ifdef MLIP_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "models/equivariant/product_basis_cuda.h"
#endif

namespace mlip::models {
namespace {

constexpr int64_t kSlots = 5;  // G, W, A1, A2, A3
enum Slot : int64_t { kGradient = 0, kWeights = 1, kFirst = 2 };

/// One term: the row of each slot's operand (-1: the factor is absent) and its coefficient.
template <typename T>
struct Term {
  std::array<int64_t, kSlots> row;
  T c;
};

template <typename T>
std::vector<Term<T>> terms_of(const ProductCoupling& coupling) {
  const auto host = host_coupling(coupling.terms, coupling.coefficients);
  const int64_t* ip = host->terms.data();
  std::vector<Term<T>> out(size_t(host->rows()));
  for (size_t t = 0; t < out.size(); ++t) {
    for (int64_t s = 0; s < kSlots; ++s) out[t].row[size_t(s)] = ip[kSlots * int64_t(t) + s];
    out[t].c = T(host->coefficients[t]);
  }
  return out;
}

/// Which slots the terms use (G and A1 always; W when weighted; A2 and A3 by the number of
/// factors), checking that every term uses the same.
std::array<bool, kSlots> present_slots(const ProductCoupling& c) {
  if (c.terms.dim() != 2 || c.terms.size(1) != kSlots)
    throw Error("product basis: expected terms [T, 5], got " + c10::str(c.terms.sizes()));
  const auto host = host_coupling(c.terms, c.coefficients);
  const int64_t* ip = host->terms.data();
  const int64_t rows = host->rows();
  std::array<bool, kSlots> present{true, true, true, false, false};
  if (rows == 0) return present;
  for (int64_t s = 0; s < kSlots; ++s) present[size_t(s)] = ip[s] >= 0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t s = 0; s < kSlots; ++s)
      if ((ip[kSlots * t + s] >= 0) != present[size_t(s)])
        throw Error("product basis: term " + std::to_string(t) + " has " + (present[size_t(s)] ? "no" : "a") +
                    " factor in slot " + std::to_string(s) + ", term 0 " + (present[size_t(s)] ? "has" : "has none") +
                    " (one coupling holds products of one number of factors)");
  if (!present[kGradient] || !present[kFirst] || (present[4] && !present[3]))
    throw Error("product basis: terms must have m, i, and j before k");
  return present;
}

/// The number of rows of each slot's operand: M, Q, K1, K2, K3 ({M, Q, K}: K for all three).
std::array<int64_t, kSlots> rows_of(const ProductCoupling& c) {
  if (c.sizes.size() == 3) return {c.sizes[0], c.sizes[1], c.sizes[2], c.sizes[2], c.sizes[2]};
  if (c.sizes.size() == 5) return {c.sizes[0], c.sizes[1], c.sizes[2], c.sizes[3], c.sizes[4]};
  throw Error("product basis: expected sizes {M, Q, K} or {M, Q, K1, K2, K3}, got " + std::to_string(c.sizes.size()) +
              " numbers");
}

/// A present operand other than the one of `slot` (it gives the node count, channels, dtype and
/// device).
int64_t reference_slot(int64_t slot, const std::array<bool, kSlots>& present) {
  return slot == kFirst || !present[kFirst] ? kGradient : kFirst;
}

/// One call of the CPU kernel: the output slot's rows and the NV other present operands
/// (pointer, rows per node), with the terms grouped by their output row (stable: each row's
/// terms in table order) and each term's row offsets (row · f) precomputed.
template <typename T>
struct KernelArgs {
  int64_t f;
  int64_t ngroups;
  const int64_t* group;             // [G + 1]: group g's terms are [group[g], group[g + 1])
  const int64_t* group_offset;      // [G]: group g's output row, times f
  const T* coefficient;             // [T]
  const int64_t* in_offset;         // [T, NV]: the input rows of each term, times f
  std::array<const T*, kSlots - 1> in;
  std::array<int64_t, kSlots - 1> in_stride;  // rows · f per node
  int64_t out_stride;
  T* out;
  // overwrite: out's values are not read (it was allocated, not zeroed): each written row's sum
  // starts from zero, and the rows no term writes (untouched, times f) are zeroed.
  bool overwrite;
  const int64_t* untouched;         // [U]
  int64_t nuntouched;
};

/// Output row g of node n (o: the node's output, base: its operands' rows), channels
/// [c0, c0 + width): its value (unless overwrite) plus c · Π (the NV other operands' rows) over
/// its terms, in registers (ChunkSum, models/kernels/channel_chunk.h), written once; the
/// additions in term order (the bits of adding term by term into the row).
template <typename T, int NV, int64_t Width>
MLIP_INLINE void product_row(const KernelArgs<T>& a, const T* const* base, T* o, int64_t g, int64_t c0,
                             int64_t width) {
  T* row = o + a.group_offset[g] + c0;
  ChunkSum<T, Width> acc(width);
  if (!a.overwrite) acc.load(row);
  for (int64_t t = a.group[g]; t < a.group[g + 1]; ++t) {
    const int64_t* off = a.in_offset + t * NV;
    const T c = a.coefficient[t];
    if constexpr (NV == 1) acc.add_product(c, base[0] + off[0] + c0);
    else if constexpr (NV == 2) acc.add_product(c, base[0] + off[0] + c0, base[1] + off[1] + c0);
    else if constexpr (NV == 3)
      acc.add_product(c, base[0] + off[0] + c0, base[1] + off[1] + c0, base[2] + off[2] + c0);
    else
      acc.add_product(c, base[0] + off[0] + c0, base[1] + off[1] + c0, base[2] + off[2] + c0, base[3] + off[3] + c0);
  }
  acc.store(row);
}

/// For the nodes in [n0, n1): each output row that some term writes is its value (zero with
/// a.overwrite) plus c · Π (the NV other operands' rows) over its terms (product_row); with
/// a.overwrite the rows without a term are zeroed.
template <typename T, int NV>
MLIP_INLINE void product_range(const KernelArgs<T>& a, int64_t n0, int64_t n1) {
  const int64_t f = a.f;
  for (int64_t n = n0; n < n1; ++n) {
    const T* base[NV];
    for (int v = 0; v < NV; ++v) base[v] = a.in[size_t(v)] + n * a.in_stride[size_t(v)];
    T* out = a.out + n * a.out_stride;
    if (a.overwrite)
      for (int64_t u = 0; u < a.nuntouched; ++u) std::fill(out + a.untouched[u], out + a.untouched[u] + f, T(0));
    for (int64_t g = 0; g < a.ngroups; ++g) {
      int64_t c0 = 0;  // full chunks of channels, then the rest (models/kernels/channel_chunk.h)
      for (; c0 + kChunk<T> <= f; c0 += kChunk<T>) product_row<T, NV, kChunk<T>>(a, base, out, g, c0, kChunk<T>);
      if (c0 < f) product_row<T, NV, 0>(a, base, out, g, c0, f - c0);
    }
  }
}

#define MLIP_PRODUCT_CLONES(T)                                                                                   \
  MLIP_CLONES void product_of_1(const KernelArgs<T>& a, int64_t n0, int64_t n1) { product_range<T, 1>(a, n0, n1); } \
  MLIP_CLONES void product_of_2(const KernelArgs<T>& a, int64_t n0, int64_t n1) { product_range<T, 2>(a, n0, n1); } \
  MLIP_CLONES void product_of_3(const KernelArgs<T>& a, int64_t n0, int64_t n1) { product_range<T, 3>(a, n0, n1); } \
  MLIP_CLONES void product_of_4(const KernelArgs<T>& a, int64_t n0, int64_t n1) { product_range<T, 4>(a, n0, n1); }
MLIP_PRODUCT_CLONES(double)
MLIP_PRODUCT_CLONES(float)

template <typename T>
void cpu_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ProductCoupling& coupling,
                torch::Tensor& out, int64_t f, bool overwrite) {
  const std::vector<Term<T>> terms = terms_of<T>(coupling);
  const auto rows = rows_of(coupling);
  const auto present = present_slots(coupling);
  std::vector<int64_t> inputs;  // the present slots other than the output's
  for (int64_t s = 0; s < kSlots; ++s)
    if (s != slot && present[size_t(s)]) inputs.push_back(s);
  const int64_t nv = int64_t(inputs.size()), nterms = int64_t(terms.size());
  // The terms grouped by output row (a counting sort, stable), the groups in row order.
  const int64_t out_rows = rows[size_t(slot)];
  std::vector<int64_t> row_start(size_t(out_rows + 1), 0);
  for (const Term<T>& q : terms) ++row_start[size_t(q.row[size_t(slot)] + 1)];
  for (int64_t r = 0; r < out_rows; ++r) row_start[size_t(r + 1)] += row_start[size_t(r)];
  std::vector<int64_t> order(static_cast<size_t>(nterms)), next(row_start.begin(), row_start.end() - 1);
  for (int64_t t = 0; t < nterms; ++t) order[size_t(next[size_t(terms[size_t(t)].row[size_t(slot)])]++)] = t;
  std::vector<int64_t> group = {0}, group_offset, untouched;
  for (int64_t r = 0; r < out_rows; ++r) {
    if (row_start[size_t(r + 1)] == row_start[size_t(r)]) {
      untouched.push_back(r * f);
      continue;
    }
    group.push_back(row_start[size_t(r + 1)]);
    group_offset.push_back(r * f);
  }
  std::vector<T> coefficient(static_cast<size_t>(nterms));
  std::vector<int64_t> in_offset(static_cast<size_t>(nterms * nv));
  for (int64_t k = 0; k < nterms; ++k) {
    const Term<T>& q = terms[size_t(order[size_t(k)])];
    coefficient[size_t(k)] = q.c;
    for (int64_t v = 0; v < nv; ++v) in_offset[size_t(k * nv + v)] = q.row[size_t(inputs[size_t(v)])] * f;
  }
  KernelArgs<T> a{f, int64_t(group_offset.size()), group.data(), group_offset.data(), coefficient.data(),
                  in_offset.data(), {}, {}, out_rows * f, out.data_ptr<T>(), overwrite, untouched.data(),
                  int64_t(untouched.size())};
  for (int64_t v = 0; v < nv; ++v) {
    a.in[size_t(v)] = op[size_t(inputs[size_t(v)])].template data_ptr<T>();
    a.in_stride[size_t(v)] = rows[size_t(inputs[size_t(v)])] * f;
  }
  const int64_t nodes = out.size(0);
  at::parallel_for(0, nodes, 4, [&](int64_t n0, int64_t n1) {
    switch (nv) {
      case 1: product_of_1(a, n0, n1); break;
      case 2: product_of_2(a, n0, n1); break;
      case 3: product_of_3(a, n0, n1); break;
      default: product_of_4(a, n0, n1);
    }
  });
}

/// The same with LibTorch operations on any device: per chunk of terms, the product of the
/// other operands' gathered rows, added into the output rows (index_add).
torch::Tensor generic_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ProductCoupling& coupling,
                             int64_t f) {
  constexpr int64_t kChunk = 256;
  const auto rows = rows_of(coupling);
  const auto present = present_slots(coupling);
  const auto& any = op[size_t(reference_slot(slot, present))];
  const int64_t nodes = any.size(0);
  const auto opts = any.options();
  const auto terms = coupling.terms.to(any.device());
  const auto coefficients = coupling.coefficients.to(opts);
  const int64_t nterms = terms.size(0);
  auto out = torch::zeros({nodes, rows[size_t(slot)], f}, opts);
  for (int64_t t0 = 0; t0 < nterms; t0 += kChunk) {
    const int64_t count = std::min(kChunk, nterms - t0);
    const auto chunk = terms.narrow(0, t0, count);
    auto prod = coefficients.narrow(0, t0, count).view({1, -1, 1}).expand({nodes, count, f}).clone();
    for (int64_t s = 0; s < kSlots; ++s)
      if (s != slot && present[size_t(s)]) prod = prod * op[size_t(s)].index_select(1, chunk.select(1, s));
    out.index_add_(1, chunk.select(1, slot), prod);
  }
  return out;
}

/// The four slots other than `slot`, in order.
std::array<int64_t, kSlots - 1> others(int64_t slot) {
  std::array<int64_t, kSlots - 1> k{};
  for (int64_t s = 0, n = 0; s < kSlots; ++s)
    if (s != slot) k[size_t(n++)] = s;
  return k;
}

/// Autograd of one partial: its inputs are the four operands other than `slot` (in slot order);
/// its backward is four more partials.
class ProductContraction : public torch::autograd::Function<ProductContraction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, int64_t slot, const ProductCoupling* coupling,
                               const torch::Tensor& first, const torch::Tensor& second, const torch::Tensor& third,
                               const torch::Tensor& fourth) {
    ctx->saved_data["slot"] = slot;
    ctx->saved_data["coupling"] = std::vector<torch::Tensor>{coupling->terms, coupling->coefficients};
    ctx->saved_data["sizes"] = coupling->sizes;
    ctx->save_for_backward({first, second, third, fourth});
    std::vector<torch::Tensor> operands(kSlots);
    const auto k = others(slot);
    operands[size_t(k[0])] = first, operands[size_t(k[1])] = second;
    operands[size_t(k[2])] = third, operands[size_t(k[3])] = fourth;
    return product_contract_kernel(slot, operands, *coupling, ProductKernel::kAuto);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t slot = ctx->saved_data["slot"].toInt();
    const auto tables = ctx->saved_data["coupling"].toTensorVector();
    const ProductCoupling coupling{tables[0], tables[1], ctx->saved_data["sizes"].toIntVector()};
    const auto saved = ctx->get_saved_variables();
    const auto k = others(slot);
    torch::autograd::variable_list out(6);  // slot, coupling, then the four operands
    if (!grads[0].defined()) return out;
    std::vector<torch::Tensor> operands(kSlots);
    for (size_t n = 0; n < 4; ++n) operands[size_t(k[n])] = saved[n];
    operands[size_t(slot)] = grads[0];
    const auto present = present_slots(coupling);
    for (size_t n = 0; n < 4; ++n)
      if (ctx->needs_input_grad(n) && present[size_t(k[n])]) out[2 + n] = product_contract(k[n], operands, coupling);
    return out;
  }
};

torch::Tensor product_basis_op(int64_t slot, const c10::optional<torch::Tensor>& g,
                               const c10::optional<torch::Tensor>& w, const c10::optional<torch::Tensor>& a1,
                               const c10::optional<torch::Tensor>& a2, const c10::optional<torch::Tensor>& a3,
                               const torch::Tensor& terms, const torch::Tensor& coefficients, c10::IntArrayRef sizes) {
  const ProductCoupling coupling{terms, coefficients, sizes.vec()};
  return product_contract(slot,
                          {g.value_or(torch::Tensor()), w.value_or(torch::Tensor()), a1.value_or(torch::Tensor()),
                           a2.value_or(torch::Tensor()), a3.value_or(torch::Tensor())},
                          coupling);
}

}  // namespace

namespace {

/// The operands of a partial by `slot` checked against the coupling's rows and made contiguous
/// (absent and output slots undefined); `some` receives the operand giving nodes and channels.
std::vector<torch::Tensor> checked_operands(int64_t slot, const std::vector<torch::Tensor>& operands,
                                            const ProductCoupling& coupling, torch::Tensor& some) {
  if (slot < 0 || slot >= kSlots) throw Error("product basis: slot must be 0..4, got " + std::to_string(slot));
  if (operands.size() != size_t(kSlots))
    throw Error("product basis: expected 5 operands, got " + std::to_string(operands.size()));
  if (coupling.terms.dim() != 2 || coupling.terms.size(1) != kSlots)
    throw Error("product basis: expected terms [T, 5], got " + c10::str(coupling.terms.sizes()));
  const auto rows = rows_of(coupling);
  const auto present = present_slots(coupling);
  if (!present[size_t(slot)])
    throw Error("product basis: slot " + std::to_string(slot) + " is absent from these products (fewer factors)");
  const int64_t reference = reference_slot(slot, present);
  some = operands[size_t(reference)];
  if (!some.defined() || some.dim() != 3)
    throw Error("product basis: operand " + std::to_string(reference) + " should be [nodes, " +
                std::to_string(rows[size_t(reference)]) + ", channels], got " +
                (some.defined() ? c10::str(some.sizes()) : std::string("none")));
  const int64_t nodes = some.size(0), f = some.size(-1);
  std::vector<torch::Tensor> op(kSlots);
  for (int64_t s = 0; s < kSlots; ++s) {
    if (s == slot || !present[size_t(s)]) continue;
    const auto& x = operands[size_t(s)];
    if (!x.defined() || x.dim() != 3 || x.size(0) != nodes || x.size(1) != rows[size_t(s)] || x.size(2) != f)
      throw Error("product basis: operand " + std::to_string(s) + " should be [" + std::to_string(nodes) + ", " +
                  std::to_string(rows[size_t(s)]) + ", " + std::to_string(f) + "], got " +
                  (x.defined() ? c10::str(x.sizes()) : std::string("none")));
    op[size_t(s)] = x.contiguous();
  }
  return op;
}

/// out [nodes, rows of slot, f] = the partial by `slot` by mlip's kernels (ProductKernel::kDevice),
/// or out += it with `accumulate`: the CUDA kernel on a CUDA device, its host twin on the CPU.
template <typename T>
void device_kernel(int64_t slot, const std::vector<torch::Tensor>& op, const ProductCoupling& coupling,
                   torch::Tensor& out, bool accumulate) {
  const auto rows = rows_of(coupling);
  const auto present = present_slots(coupling);
  const int64_t nodes = out.size(0), out_rows = rows[size_t(slot)], f = out.size(2);
  const GroupedTerms terms = grouped_terms(coupling.terms, coupling.coefficients, slot, out_rows, out.options());
  ProductRuleArgs<T> a;
  a.terms = terms.terms.data_ptr<int64_t>();
  a.coefficients = terms.coefficients.data_ptr<T>();
  a.group = terms.group.data_ptr<int64_t>();
  a.f = f;
  for (int64_t s = 0; s < kSlots; ++s) {
    a.rows[s] = rows[size_t(s)];
    if (s != slot && present[size_t(s)]) a.operand[s] = op[size_t(s)].template data_ptr<T>();
  }
  if (out.device().is_cpu()) {
    T* o = out.data_ptr<T>();
    at::parallel_for(0, nodes, 4, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t r = 0; r < out_rows; ++r)
          for (int64_t c = 0; c < f; ++c) {
            const int64_t k = (n * out_rows + r) * f + c;
            const T value = product_element(a, n, r, c);
            o[k] = accumulate ? o[k] + value : value;
          }
    });
    return;
  }
#ifdef MLIP_HAVE_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(out.device());
  launch_product_basis(a, nodes, out_rows, out.data_ptr<T>(), accumulate,
                       c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
#endif
}

/// device_kernel in out's dtype, after checking that it can run where out lives.
void accumulate_device(int64_t slot, const std::vector<torch::Tensor>& op, const ProductCoupling& coupling,
                       torch::Tensor& out, bool accumulate) {
  require_device_kernels("product basis", out.device());
  if (out.scalar_type() == torch::kFloat64)
    device_kernel<double>(slot, op, coupling, out, accumulate);
  else if (out.scalar_type() == torch::kFloat32)
    device_kernel<float>(slot, op, coupling, out, accumulate);
  else
    throw Error("product basis: expected float32 or float64 operands");
}

/// Which kernel computes a partial of operands on `device`: kAuto resolved by kernel_route
/// (kAuto stands for the CPU kernel).
ProductKernel route(ProductKernel kernel, const torch::Device& device) {
  if (kernel != ProductKernel::kAuto) return kernel;
  switch (kernel_route(device)) {
    case KernelRoute::kHostLoops: return ProductKernel::kAuto;
    case KernelRoute::kDeviceKernels: return ProductKernel::kDevice;
    default: return ProductKernel::kGeneric;
  }
}

/// out [nodes, rows of slot, f] += the partial by `slot` (CPU kernel; host tensors); with
/// `overwrite`, out = the partial (out's values are not read).
void accumulate_cpu(int64_t slot, const std::vector<torch::Tensor>& op, const ProductCoupling& coupling,
                    torch::Tensor& out, bool overwrite) {
  const int64_t f = out.size(2);
  if (out.scalar_type() == torch::kFloat64)
    cpu_kernel<double>(slot, op, coupling, out, f, overwrite);
  else if (out.scalar_type() == torch::kFloat32)
    cpu_kernel<float>(slot, op, coupling, out, f, overwrite);
  else
    throw Error("product basis: expected float32 or float64 operands");
}

}  // namespace

torch::Tensor product_contract_kernel(int64_t slot, const std::vector<torch::Tensor>& operands,
                                      const ProductCoupling& coupling, ProductKernel kernel) {
  torch::Tensor some;
  const auto op = checked_operands(slot, operands, coupling, some);
  const int64_t f = some.size(-1);
  const ProductKernel chosen = route(kernel, some.device());
  if (chosen == ProductKernel::kGeneric) return generic_kernel(slot, op, coupling, f);
  auto out = torch::empty({some.size(0), rows_of(coupling)[size_t(slot)], f}, some.options());
  if (chosen == ProductKernel::kDevice)
    accumulate_device(slot, op, coupling, out, /*accumulate=*/false);
  else
    accumulate_cpu(slot, op, coupling, out, /*overwrite=*/true);
  return out;
}

torch::Tensor product_contract(int64_t slot, const std::vector<torch::Tensor>& operands,
                               const ProductCoupling& coupling) {
  if (slot < 0 || slot >= kSlots) throw Error("product basis: slot must be 0..4, got " + std::to_string(slot));
  const auto k = others(slot);
  // Absent operands (products of fewer factors, no weights) go in as empty tensors: autograd's
  // custom functions take defined tensors only.
  const int64_t reference = reference_slot(slot, present_slots(coupling));
  const auto& some = operands[size_t(reference)];
  if (!some.defined()) throw Error("product basis: operand " + std::to_string(reference) + " is missing");
  auto input = [&](size_t n) {
    const auto& x = operands[size_t(k[n])];
    return x.defined() ? x : torch::empty({0}, some.options());
  };
  return ProductContraction::apply(slot, &coupling, input(0), input(1), input(2), input(3));
}

namespace {

/// The forms holding operand `operand` and every operand of `required`, each with the slot
/// `operand` fills.
std::vector<std::pair<const ProductForm*, int64_t>> contributing(int64_t operand, int64_t required,
                                                                 const std::vector<ProductForm>& forms) {
  std::vector<std::pair<const ProductForm*, int64_t>> out;
  for (const ProductForm& form : forms) {
    int64_t slot = -1, held = 0;
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t o = form.operand[size_t(s)];
      if (o < 0) continue;
      held |= int64_t(1) << o;
      if (o == operand) slot = s;
    }
    if (slot >= 0 && (held & required) == required) out.emplace_back(&form, slot);
  }
  return out;
}

/// ∂F_R/∂(operand) without autograd: each contributing form's partial into one output.
torch::Tensor product_sum_kernel(int64_t operand, const std::vector<torch::Tensor>& operands,
                                 const std::vector<ProductForm>& forms, int64_t required) {
  torch::Tensor out;
  for (const auto& [form, slot] : contributing(operand, required, forms)) {
    std::vector<torch::Tensor> local(kSlots);
    for (int64_t s = 0; s < kSlots; ++s)
      if (form->operand[size_t(s)] >= 0 && s != slot) local[size_t(s)] = operands[size_t(form->operand[size_t(s)])];
    torch::Tensor some;
    const auto op = checked_operands(slot, local, form->coupling, some);
    const ProductKernel chosen = route(ProductKernel::kAuto, some.device());
    if (chosen == ProductKernel::kGeneric) {
      const auto part = generic_kernel(slot, op, form->coupling, some.size(-1));
      out = out.defined() ? out + part : part;
      continue;
    }
    const bool first = !out.defined();
    if (first) out = torch::empty({some.size(0), rows_of(form->coupling)[size_t(slot)], some.size(-1)}, some.options());
    if (chosen == ProductKernel::kDevice)
      accumulate_device(slot, op, form->coupling, out, /*accumulate=*/!first);
    else
      accumulate_cpu(slot, op, form->coupling, out, /*overwrite=*/first);
  }
  if (!out.defined())
    throw Error("product sum: no form holds operand " + std::to_string(operand) + " with the operands required");
  return out;
}

/// The forms' tables as saved data, and back.
void save_forms(torch::autograd::AutogradContext* ctx, const std::vector<ProductForm>& forms) {
  std::vector<torch::Tensor> terms, coefficients;
  std::vector<int64_t> sizes, slots;
  for (const ProductForm& form : forms) {
    terms.push_back(form.coupling.terms), coefficients.push_back(form.coupling.coefficients);
    sizes.insert(sizes.end(), form.coupling.sizes.begin(), form.coupling.sizes.end());
    slots.insert(slots.end(), form.operand.begin(), form.operand.end());
  }
  ctx->saved_data["terms"] = terms, ctx->saved_data["coefficients"] = coefficients;
  ctx->saved_data["sizes"] = sizes, ctx->saved_data["slots"] = slots;
}

std::vector<ProductForm> forms_of(at::TensorList terms, at::TensorList coefficients, c10::IntArrayRef sizes,
                                  c10::IntArrayRef slots) {
  if (coefficients.size() != terms.size() || sizes.size() != kSlots * terms.size() ||
      slots.size() != kSlots * terms.size())
    throw Error("product sum: expected per form one terms and one coefficients tensor, 5 sizes and 5 slots; got " +
                std::to_string(terms.size()) + ", " + std::to_string(coefficients.size()) + ", " +
                std::to_string(sizes.size()) + ", " + std::to_string(slots.size()));
  std::vector<ProductForm> forms(terms.size());
  for (size_t k = 0; k < forms.size(); ++k) {
    forms[k].coupling = {terms[k], coefficients[k], std::vector<int64_t>(sizes.begin() + 5 * k, sizes.begin() + 5 * k + 5)};
    for (size_t s = 0; s < size_t(kSlots); ++s) forms[k].operand[s] = slots[5 * k + s];
  }
  return forms;
}

std::vector<ProductForm> saved_forms(torch::autograd::AutogradContext* ctx) {
  const auto terms = ctx->saved_data["terms"].toTensorVector();
  const auto coefficients = ctx->saved_data["coefficients"].toTensorVector();
  return forms_of(terms, coefficients, ctx->saved_data["sizes"].toIntVector(), ctx->saved_data["slots"].toIntVector());
}

/// Autograd of one partial of a product sum: its inputs are the operands other than `operand`
/// (in order); its backward is a partial of the sum restricted further (product_sum()).
class ProductSum : public torch::autograd::Function<ProductSum> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, int64_t operand, int64_t required,
                               const std::vector<ProductForm>* forms, at::TensorList others) {
    ctx->saved_data["operand"] = operand;
    ctx->saved_data["required"] = required;
    save_forms(ctx, *forms);
    ctx->save_for_backward(others.vec());
    std::vector<torch::Tensor> operands(others.begin(), others.end());
    operands.insert(operands.begin() + operand, torch::Tensor());
    return product_sum_kernel(operand, operands, *forms, required);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t operand = ctx->saved_data["operand"].toInt();
    const int64_t required = ctx->saved_data["required"].toInt() | (int64_t(1) << operand);
    auto operands = ctx->get_saved_variables();
    torch::autograd::variable_list out(3 + operands.size());  // operand, required, forms, then the others
    if (!grads[0].defined()) return out;
    operands.insert(operands.begin() + operand, grads[0]);
    const auto forms = saved_forms(ctx);
    for (size_t n = 0, other = 0; n < operands.size(); ++n) {
      if (int64_t(n) == operand) continue;
      const size_t input = other++;
      if (ctx->needs_input_grad(input) && !contributing(int64_t(n), required, forms).empty())
        out[3 + input] = product_sum(int64_t(n), operands, forms, required);
    }
    return out;
  }
};

torch::Tensor product_sum_op(at::TensorList operands, at::TensorList terms, at::TensorList coefficients,
                             c10::IntArrayRef sizes, c10::IntArrayRef slots) {
  std::vector<torch::Tensor> all = {torch::Tensor()};
  all.insert(all.end(), operands.begin(), operands.end());
  return product_sum(0, all, forms_of(terms, coefficients, sizes, slots), 0);
}

}  // namespace

torch::Tensor product_sum(int64_t operand, const std::vector<torch::Tensor>& operands,
                          const std::vector<ProductForm>& forms, int64_t required) {
  const int64_t n = int64_t(operands.size());
  if (operand < 0 || operand >= n)
    throw Error("product sum: operand must be 0.." + std::to_string(n - 1) + ", got " + std::to_string(operand));
  for (const ProductForm& form : forms) {
    int64_t held = 0;
    for (int64_t o : form.operand) {
      if (o >= n) throw Error("product sum: a form reads operand " + std::to_string(o) + " of " + std::to_string(n));
      if (o >= 0 && (held & (int64_t(1) << o)))
        throw Error("product sum: operand " + std::to_string(o) + " fills two slots of one form (not linear in it)");
      if (o >= 0) held |= int64_t(1) << o;
    }
  }
  // Operands no contributing form reads may be undefined; autograd's inputs must be defined.
  std::vector<torch::Tensor> others;
  for (int64_t k = 0; k < n; ++k)
    if (k != operand) others.push_back(operands[size_t(k)].defined() ? operands[size_t(k)] : torch::empty({0}));
  return ProductSum::apply(operand, required, &forms, at::TensorList(others));
}

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("product_basis(int slot, Tensor? g, Tensor? w, Tensor? a1, Tensor? a2, Tensor? a3, Tensor terms, "
        "Tensor coefficients, int[] sizes) -> Tensor",
        &product_basis_op);
  m.def("product_sum(Tensor[] operands, Tensor[] terms, Tensor[] coefficients, int[] sizes, int[] slots) -> Tensor",
        &product_sum_op);
}

void register_product_basis() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
