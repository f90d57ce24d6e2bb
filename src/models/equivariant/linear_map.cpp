#include "models/equivariant/linear_map.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <string>

#include "error.h"
#include "models/kernels/host_tensor.h"
#include "models/kernels/scaled_product.h"
#include "models/kernels/gemm.h"

namespace mlip::models {
namespace {

enum Slot : int64_t { kGradient = 0, kInput = 1, kMap = 2 };

/// The partial by `slot` on the host: one BLAS call on the operands' rows (models/kernels/gemm.h,
/// no tensor operations), the factor as its alpha; ldg, ldx: the row strides of G and X.
template <typename T>
void host_partial(int64_t slot, const torch::Tensor& g, int64_t ldg, const torch::Tensor& x, int64_t ldx,
                  const torch::Tensor& w, int64_t i, int64_t o, int64_t r, T factor, torch::Tensor& out) {
  switch (slot) {
    case kGradient: {  // [R, o] = s · X W
      gemm<T>(false, false, r, o, i, factor, x.data_ptr<T>(), ldx, w.data_ptr<T>(), o, T(0), out.data_ptr<T>(), o);
      break;
    }
    case kInput: {  // [R, i] = s · G Wᵀ
      gemm<T>(false, true, r, i, o, factor, g.data_ptr<T>(), ldg, w.data_ptr<T>(), o, T(0), out.data_ptr<T>(), i);
      break;
    }
    default: {  // [i, o] = s · Xᵀ G
      gemm<T>(true, false, i, o, r, factor, x.data_ptr<T>(), ldx, g.data_ptr<T>(), ldg, T(0), out.data_ptr<T>(), o);
    }
  }
}

/// A contiguous copy of host tensor t [..., c] whose rows are contiguous (unit stride along c),
/// made row by row with memcpy: no LibTorch operation beyond the allocation.
torch::Tensor packed_rows(const torch::Tensor& t) {
  auto out = torch::empty(t.sizes(), t.options());
  const int64_t c = t.size(-1), lead = t.dim() - 1;
  if (out.numel() == 0) return out;
  const int64_t rows = out.numel() / c, size = t.element_size();
  const auto* from = static_cast<const char*>(t.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  std::vector<int64_t> index(size_t(lead), 0);
  int64_t offset = 0;  // of row r in t, in elements
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * c * size, from + offset * size, size_t(c * size));
    for (int64_t d = lead - 1; d >= 0; --d) {  // the next row's index, last axis fastest
      offset += t.stride(d);
      if (++index[size_t(d)] < t.size(d)) break;
      offset -= t.stride(d) * t.size(d);
      index[size_t(d)] = 0;
    }
  }
  return out;
}

/// t [..., c] (host) as a matrix of rows: t itself when its leading axes collapse into one
/// evenly strided axis of rows (a view: the row stride in `ld`), else a contiguous copy (ld = c).
torch::Tensor as_rows(const torch::Tensor& t, int64_t& ld) {
  const int64_t c = t.size(-1);
  ld = c;
  if (t.is_contiguous()) return t;
  if (c > 1 && t.stride(-1) != 1) return t.contiguous();
  // The leading axes of more than one entry, outermost first, must nest: stride = inner stride x inner size.
  int64_t inner = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (inner >= 0 && t.stride(d) != t.stride(inner) * t.size(inner)) return packed_rows(t);
    if (inner < 0 && t.stride(d) < c) return packed_rows(t);
    inner = d;
    if (ld == c) ld = t.stride(d);
  }
  return t;
}

/// The partial by `slot` without autograd (docs/equivariant.md "The training path").
torch::Tensor partial_kernel(int64_t slot, const std::vector<torch::Tensor>& op, double factor) {
  const auto& w = slot == kMap ? op[kInput] : op[kMap];  // an operand giving the dtype and device
  // i, o: the map's rows and columns; rows: the operands' rows R.
  const int64_t i = slot == kMap ? op[kInput].size(-1) : op[kMap].size(0);
  const int64_t o = slot == kMap ? op[kGradient].size(-1) : op[kMap].size(1);
  const int64_t rows = (slot == kInput ? op[kGradient].numel() / o : op[kInput].numel() / i);
  std::vector<int64_t> shape = {i, o};
  if (slot != kMap) shape = (slot == kGradient ? op[kInput] : op[kGradient]).sizes().vec(), shape.back() = slot == kGradient ? o : i;
  const bool host = on_host(w);
  if (!host || rows == 0) {  // LibTorch's operations (any device; no rows: zeros)
    const auto flat = [](const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); };
    torch::Tensor out;
    if (slot == kGradient) out = scaled_product(flat(op[kInput]), op[kMap], factor);
    else if (slot == kInput) out = scaled_product(flat(op[kGradient]), op[kMap].t(), factor);
    else out = scaled_product(flat(op[kInput]).t(), flat(op[kGradient]), factor);
    return out.view(shape);
  }
  std::vector<torch::Tensor> c(3);
  int64_t ldg = o, ldx = i;
  if (slot != kGradient) c[kGradient] = as_rows(op[kGradient], ldg);
  if (slot != kInput) c[kInput] = as_rows(op[kInput], ldx);
  if (slot != kMap) c[kMap] = op[kMap].contiguous();
  auto out = torch::empty(shape, w.options());
  if (w.scalar_type() == torch::kFloat64)
    host_partial<double>(slot, c[kGradient], ldg, c[kInput], ldx, c[kMap], i, o, rows, factor, out);
  else
    host_partial<float>(slot, c[kGradient], ldg, c[kInput], ldx, c[kMap], i, o, rows, float(factor), out);
  return out;
}

std::array<int64_t, 2> others(int64_t slot) {
  std::array<int64_t, 2> k{};
  for (int64_t s = 0, n = 0; s < 3; ++s)
    if (s != slot) k[size_t(n++)] = s;
  return k;
}

/// Autograd of one partial: its inputs are the two operands other than `slot`; its backward is
/// two more partials.
class LinearPartial : public torch::autograd::Function<LinearPartial> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, int64_t slot, double factor,
                               const torch::Tensor& first, const torch::Tensor& second) {
    ctx->saved_data["slot"] = slot;
    ctx->saved_data["factor"] = factor;
    ctx->save_for_backward({first, second});
    std::vector<torch::Tensor> op(3);
    const auto k = others(slot);
    op[size_t(k[0])] = first, op[size_t(k[1])] = second;
    return partial_kernel(slot, op, factor);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t slot = ctx->saved_data["slot"].toInt();
    const double factor = ctx->saved_data["factor"].toDouble();
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list out(4);  // slot, factor, then the two operands
    if (!grads[0].defined()) return out;
    const auto k = others(slot);
    std::vector<torch::Tensor> op(3);
    op[size_t(k[0])] = saved[0], op[size_t(k[1])] = saved[1];
    op[size_t(slot)] = grads[0];
    for (size_t n = 0; n < 2; ++n)
      if (ctx->needs_input_grad(n)) out[2 + n] = linear_partial(k[n], op, factor);
    return out;
  }
};

torch::Tensor linear_op(const torch::Tensor& x, const torch::Tensor& w, double factor) {
  return linear_map(x, w, factor);
}

}  // namespace

torch::Tensor linear_partial(int64_t slot, const std::vector<torch::Tensor>& operands, double factor) {
  if (slot < 0 || slot > 2) throw Error("linear map: slot must be 0..2, got " + std::to_string(slot));
  if (operands.size() != 3) throw Error("linear map: expected 3 operands, got " + std::to_string(operands.size()));
  const auto k = others(slot);
  return LinearPartial::apply(slot, factor, operands[size_t(k[0])], operands[size_t(k[1])]);
}

torch::Tensor linear_map(const torch::Tensor& x, const torch::Tensor& w, double factor) {
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != w.size(0))
    throw Error("linear map: expected x [..., i] and w [i, o], got x " + c10::str(x.sizes()) + " and w " +
                c10::str(w.sizes()));
  if (x.scalar_type() != w.scalar_type())
    throw Error("linear map: x and w must have one dtype, got " + std::string(c10::toString(x.scalar_type())) +
                " and " + std::string(c10::toString(w.scalar_type())));
  return linear_partial(kGradient, {torch::Tensor(), x, w}, factor);
}

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("linear(Tensor x, Tensor w, float factor) -> Tensor", &linear_op);
}

void register_linear_map() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
