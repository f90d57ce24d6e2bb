#include "models/equivariant/row_split.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>

#include "error.h"

namespace mlip::models {
namespace {

/// The split without autograd: rows[k] rows per output, reshaped by components[k].
std::vector<torch::Tensor> split_kernel(const torch::Tensor& x, const std::vector<int64_t>& rows,
                                        const std::vector<int64_t>& components) {
  std::vector<torch::Tensor> out;
  const int64_t n = x.size(0), f = x.size(2);
  int64_t first = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    out.push_back(x.narrow(1, first, rows[k]).reshape({n, components[k], rows[k] * f / components[k]}).contiguous());
    first += rows[k];
  }
  return out;
}

/// The concatenation without autograd: the parts' rows side by side, x's shape [n, R, f].
torch::Tensor concatenate_kernel(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& rows,
                                 int64_t f) {
  std::vector<torch::Tensor> views;
  for (size_t k = 0; k < parts.size(); ++k) views.push_back(parts[k].reshape({parts[k].size(0), rows[k], f}));
  return torch::cat(views, 1);
}

class RowConcatenation;

/// The split as a node: input x; outputs the parts; backward: RowConcatenation.
class RowSplit : public torch::autograd::Function<RowSplit> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const std::vector<int64_t>& rows,
                                                const std::vector<int64_t>& components) {
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["components"] = components;
    ctx->saved_data["n"] = x.size(0);
    ctx->saved_data["f"] = x.size(2);
    ctx->saved_data["like"] = torch::empty({0}, x.options());  // dtype and device of x
    return split_kernel(x, rows, components);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

/// The concatenation as a node: inputs the parts; output x; backward: RowSplit.
class RowConcatenation : public torch::autograd::Function<RowConcatenation> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList parts,
                               const std::vector<int64_t>& rows, const std::vector<int64_t>& components, int64_t f) {
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["components"] = components;
    return concatenate_kernel(parts.vec(), rows, f);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto rows = ctx->saved_data["rows"].toIntVector();
    const auto components = ctx->saved_data["components"].toIntVector();
    torch::autograd::variable_list out;  // the parts, then rows, components, f
    if (grads[0].defined()) out = RowSplit::apply(grads[0], rows, components);
    else out.resize(rows.size());
    out.resize(rows.size() + 3);
    return out;
  }
};

torch::autograd::variable_list RowSplit::backward(torch::autograd::AutogradContext* ctx,
                                                  torch::autograd::variable_list grads) {
  const auto rows = ctx->saved_data["rows"].toIntVector();
  const auto components = ctx->saved_data["components"].toIntVector();
  const int64_t n = ctx->saved_data["n"].toInt(), f = ctx->saved_data["f"].toInt();
  const auto options = ctx->saved_data["like"].toTensor().options();
  bool any = false;
  for (const auto& g : grads) any = any || g.defined();
  torch::autograd::variable_list out(3);  // x, rows, components
  if (!any) return out;
  std::vector<torch::Tensor> parts;
  for (size_t k = 0; k < rows.size(); ++k)
    parts.push_back(grads[k].defined() ? grads[k]
                                       : torch::zeros({n, components[k], rows[k] * f / components[k]}, options));
  out[0] = RowConcatenation::apply(at::TensorList(parts), rows, components, f);
  return out;
}

std::vector<torch::Tensor> split_rows_op(const torch::Tensor& x, c10::IntArrayRef rows, c10::IntArrayRef components) {
  return split_rows(x, rows.vec(), components.vec());
}

}  // namespace

std::vector<torch::Tensor> split_rows(const torch::Tensor& x, const std::vector<int64_t>& rows,
                                      const std::vector<int64_t>& components) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (x.dim() != 3 || x.size(1) != total || rows.size() != components.size())
    throw Error("split_rows: expected x [n, " + std::to_string(total) + ", f] and one component count per part, got x " +
                c10::str(x.sizes()) + ", " + std::to_string(rows.size()) + " parts and " +
                std::to_string(components.size()) + " component counts");
  for (size_t k = 0; k < rows.size(); ++k)
    if (components[k] <= 0 || (rows[k] * x.size(2)) % components[k] != 0)
      throw Error("split_rows: part " + std::to_string(k) + " has " + std::to_string(rows[k]) + " rows of " +
                  std::to_string(x.size(2)) + ", not divisible into " + std::to_string(components[k]) + " components");
  return RowSplit::apply(x, rows, components);
}

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("split_rows(Tensor x, int[] rows, int[] components) -> Tensor[]", &split_rows_op);
}

void register_row_split() {
  // The TORCH_LIBRARY_FRAGMENT block above registers the operator when this file's object is
  // linked in; calling this function makes sure it is.
}

}  // namespace mlip::models
