#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlip::models {

/// One dense layer of docs/se_e2_a.md's layer rule: y = tanh(x W + b), times idt when resnet_dt,
/// plus x (same width) or concat(x, x) (double width).
struct Layer {
  int64_t in, out;
  enum Skip { kNone, kSame, kDouble } skip;
  bool idt;
};

/// How many copies of x skip(x) holds: 0 (no skip), 1 (same width) or 2 (concat(x, x)).
inline int skip_copies(const Layer& layer) {
  return layer.skip == Layer::kNone ? 0 : layer.skip == Layer::kSame ? 1 : 2;
}

/// The layers of a stack of widths [w_0, w_1, ...] (w_0 = input width).
inline std::vector<Layer> layers_of(const std::vector<int64_t>& widths, bool resnet_dt) {
  std::vector<Layer> layers;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    Layer layer{widths[l], widths[l + 1], Layer::kNone, false};
    if (layer.out == layer.in) layer.skip = Layer::kSame;
    else if (layer.out == 2 * layer.in) layer.skip = Layer::kDouble;
    layer.idt = resnet_dt && layer.skip != Layer::kNone;
    layers.push_back(layer);
  }
  return layers;
}

}  // namespace mlip::models
