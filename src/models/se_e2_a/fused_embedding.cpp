#include "models/se_e2_a/fused_embedding.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "error.h"
#include "models/kernels/device_kernels.h"
#include "models/se_e2_a/fused_embedding_rule.h"

#ifdef MLIP_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "models/se_e2_a/fused_embedding_cuda.h"
#endif

namespace mlip::models {

EmbeddingNetParameters EmbeddingNetParameters::of_se_e2_a(const torch::jit::Module& module, const SeAConfig& config,
                                                          int64_t net) {
  if (net < 0 || net >= embedding_net_count(config))
    throw Error("EmbeddingNetParameters: net " + std::to_string(net) + " of a model with " +
                std::to_string(embedding_net_count(config)) + " embedding nets");
  std::vector<int64_t> widths = {1};
  widths.insert(widths.end(), config.neuron.begin(), config.neuron.end());
  EmbeddingNetParameters p;
  p.layers = layers_of(widths, config.resnet_dt);
  const std::string name = embedding_net_name(config, net) + "_";
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const std::string index = std::to_string(l);
    p.weights.push_back(module.attr(name + "w" + index).toTensor());
    p.biases.push_back(module.attr(name + "b" + index).toTensor());
    p.timesteps.push_back(p.layers[l].idt ? module.attr(name + "idt" + index).toTensor() : torch::Tensor());
  }
  return p;
}

namespace {

std::string describe(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.scalar_type() << " on " << t.device();
  return out.str();
}

/// Checks one parameter against the shape it should have and the inputs' dtype and device.
void check_parameter(const torch::Tensor& t, const std::vector<int64_t>& shape, const torch::Tensor& s,
                     const std::string& what) {
  if (!t.defined() || t.sizes() != c10::IntArrayRef(shape) || t.scalar_type() != s.scalar_type() ||
      t.device() != s.device()) {
    std::ostringstream expected;
    expected << c10::IntArrayRef(shape) << " " << s.scalar_type() << " on " << s.device();
    throw Error("fused_embedding: " + what + ": expected " + expected.str() + " (the inputs' dtype and device), got " +
                (t.defined() ? describe(t) : std::string("no tensor")));
  }
}

/// The net as raw pointers, after checking every tensor; `held` keeps contiguous copies alive.
template <typename R>
FusedNet<R> fused_net_of(const EmbeddingNetParameters& net, const torch::Tensor& s, std::vector<torch::Tensor>& held) {
  const size_t nl = net.layers.size();
  if (nl == 0 || nl > size_t(kMaxFusedLayers))
    throw Error("fused_embedding: expected 1 to " + std::to_string(kMaxFusedLayers) + " layers, got " +
                std::to_string(nl));
  if (net.weights.size() != nl || net.biases.size() != nl || net.timesteps.size() != nl)
    throw Error("fused_embedding: " + std::to_string(nl) + " layers but " + std::to_string(net.weights.size()) +
                " weights, " + std::to_string(net.biases.size()) + " biases and " +
                std::to_string(net.timesteps.size()) + " timesteps");
  FusedNet<R> f;
  f.layers = int(nl);
  f.max_width = 1;
  auto pointer = [&](const torch::Tensor& t) {
    held.push_back(t.contiguous());
    return static_cast<const R*>(held.back().data_ptr<R>());
  };
  int64_t width = 1;  // the input s
  for (size_t l = 0; l < nl; ++l) {
    const Layer& layer = net.layers[l];
    const std::string name = "layer " + std::to_string(l);
    if (layer.in != width)
      throw Error("fused_embedding: " + name + " takes rows of " + std::to_string(layer.in) +
                  ", the layer before gives " + std::to_string(width));
    const int skip = skip_copies(layer);
    if (skip > 0 && layer.out != skip * layer.in)
      throw Error("fused_embedding: " + name + " (" + std::to_string(layer.in) + " -> " + std::to_string(layer.out) +
                  ") cannot add its input " + std::to_string(skip) + " times");
    check_parameter(net.weights[l], {layer.in, layer.out}, s, name + "'s weights");
    check_parameter(net.biases[l], {layer.out}, s, name + "'s biases");
    if (layer.idt) check_parameter(net.timesteps[l], {layer.out}, s, name + "'s timesteps (idt)");
    f.in[l] = int(layer.in);
    f.out[l] = int(layer.out);
    f.skip[l] = skip;
    f.w[l] = pointer(net.weights[l]);
    f.b[l] = pointer(net.biases[l]);
    f.idt[l] = layer.idt ? pointer(net.timesteps[l]) : nullptr;
    width = layer.out;
    f.max_width = std::max(f.max_width, int(width));
  }
  return f;
}

/// The host twin of the CUDA kernel: each pair through every layer with fused_neuron.
template <typename R>
void host_fused_embedding(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, R* g, R* slope) {
  const int width = net.max_width, m = net.out[net.layers - 1];
  at::parallel_for(0, q, 256, [&](int64_t begin, int64_t end) {
    std::vector<R> rows(size_t(4 * width));  // current and next: values, then derivatives
    for (int64_t p = begin; p < end; ++p) {
      R* current = rows.data();
      R* next = current + 2 * width;
      current[0] = s[p * stride];
      current[width] = R(1);
      for (int l = 0; l < net.layers; ++l) {
        const bool last = l + 1 == net.layers;
        for (int o = 0; o < net.out[l]; ++o) {
          R* v = last ? g + p * m + o : next + o;
          R* t = last ? slope + p * m + o : next + width + o;
          fused_neuron(net, l, current, current + width, o, v, t);
        }
        std::swap(current, next);
      }
    }
  });
}

/// The host twin of the adjoint kernel, a pair at a time: forward keeping the input rows, then
/// fused_neuron_adjoint and fused_input_adjoint layer by layer in reverse.
template <typename R>
void host_fused_embedding_adjoint(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, const R* grad_value,
                                  const R* grad_slope, const FusedAdjointScratch<R>& scratch, R* input_gradient) {
  const int width = net.max_width, m = net.out[net.layers - 1];
  at::parallel_for(0, q, 256, [&](int64_t begin, int64_t end) {
    std::vector<R> rows(size_t(6 * width));  // current, next, the neurons' zb and ztb
    for (int64_t p = begin; p < end; ++p) {
      R* current = rows.data();
      R* next = current + 2 * width;
      R* zrow = next + 2 * width;
      current[0] = s[p * stride];
      current[width] = R(1);
      for (int l = 0; l < net.layers; ++l) {
        const int in = net.in[l];
        R* kept = scratch.inputs[l] + p * 2 * in;
        std::copy(current, current + in, kept);
        std::copy(current + width, current + width + in, kept + in);
        if (l + 1 < net.layers)
          for (int o = 0; o < net.out[l]; ++o)
            fused_neuron(net, l, current, current + width, o, next + o, next + width + o);
        std::swap(current, next);
      }
      std::copy(grad_value + p * m, grad_value + (p + 1) * m, current);
      std::copy(grad_slope + p * m, grad_slope + (p + 1) * m, current + width);
      for (int l = net.layers - 1; l >= 0; --l) {
        const int in = net.in[l], out = net.out[l];
        const R* x = scratch.inputs[l] + p * 2 * in;
        R* zbar = scratch.zbar[l] + p * 2 * out;
        for (int o = 0; o < out; ++o) {
          R share;
          fused_neuron_adjoint(net, l, x, x + in, o, current[o], current[width + o], &zrow[o], &zrow[width + o],
                               &share);
          zbar[o] = zrow[o];
          zbar[out + o] = zrow[width + o];
          if (scratch.idt_share[l] != nullptr) scratch.idt_share[l][p * out + o] = share;
        }
        for (int i = 0; i < in; ++i)
          fused_input_adjoint(net, l, zrow, zrow + width, current, current + width, i, &next[i], &next[width + i]);
        std::swap(current, next);
      }
      if (input_gradient != nullptr) input_gradient[p] = current[0];
    }
  });
}

/// Checks the inputs s: a 1-D float32 or float64 tensor.
void check_inputs(const torch::Tensor& s) {
  if (!s.defined() || s.dim() != 1)
    throw Error("fused_embedding: expected the inputs s as a 1-D tensor [pairs], got " +
                (s.defined() ? describe(s) : std::string("no tensor")));
  if (s.scalar_type() != torch::kFloat64 && s.scalar_type() != torch::kFloat32)
    throw Error("fused_embedding: expected float32 or float64 inputs, got " + describe(s));
}

[[noreturn]] void no_kernels_for(const torch::Tensor& s) {
  if (!s.device().is_cuda())
    throw Error("fused_embedding: expected inputs on the CPU or a CUDA device, got " + s.device().str());
  throw Error("fused_embedding: the inputs are on " + s.device().str() +
              ", but this mlip was built without its CUDA kernels (MLIP_CUDA_KERNELS=OFF, or a LibTorch without CUDA)");
}

#ifdef MLIP_HAVE_CUDA_KERNELS
/// The current CUDA stream of the inputs' device, as a cudaStream_t.
void* stream_of(const torch::Tensor& s) { return c10::cuda::getCurrentCUDAStream(s.device().index()).stream(); }
#endif

template <typename R>
EmbeddingOutputs run(const torch::Tensor& s, const EmbeddingNetParameters& net) {
  std::vector<torch::Tensor> held;
  const FusedNet<R> fused = fused_net_of<R>(net, s, held);
  const int64_t q = s.size(0), m = net.layers.back().out;
  EmbeddingOutputs out{torch::empty({q, m}, s.options()), torch::empty({q, m}, s.options())};
  R* g = out.value.data_ptr<R>();
  R* slope = out.slope.data_ptr<R>();
  if (s.device().is_cpu()) {
    host_fused_embedding(fused, s.data_ptr<R>(), s.stride(0), q, g, slope);
    return out;
  }
#ifdef MLIP_HAVE_CUDA_KERNELS
  if (s.device().is_cuda()) {
    const c10::cuda::CUDAGuard guard(s.device());
    launch_fused_embedding(fused, s.data_ptr<R>(), s.stride(0), q, g, slope, stream_of(s));
    return out;
  }
#endif
  no_kernels_for(s);
}

/// Checks one of the adjoint's incoming gradients: [q, M], the inputs' dtype and device.
torch::Tensor checked_gradient(const torch::Tensor& t, int64_t q, int64_t m, const torch::Tensor& s,
                               const std::string& what) {
  check_parameter(t, {q, m}, s, what);
  return t.contiguous();
}

template <typename R>
EmbeddingGradients run_adjoint(const torch::Tensor& s, const EmbeddingNetParameters& net,
                               const torch::Tensor& grad_value, const torch::Tensor& grad_slope) {
  std::vector<torch::Tensor> held;
  const FusedNet<R> fused = fused_net_of<R>(net, s, held);
  const int64_t q = s.size(0), m = net.layers.back().out;
  const torch::Tensor value_bar = checked_gradient(grad_value, q, m, s, "d loss / dG");
  const torch::Tensor slope_bar = checked_gradient(grad_slope, q, m, s, "d loss / d(dG/ds)");
  // The kernel's scratch: per layer its input rows, d loss / d(pre-activations), idt shares.
  std::vector<torch::Tensor> inputs, zbar, idt_share;
  FusedAdjointScratch<R> scratch;
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const Layer& layer = net.layers[l];
    inputs.push_back(torch::empty({q, 2, layer.in}, s.options()));
    zbar.push_back(torch::empty({q, 2, layer.out}, s.options()));
    idt_share.push_back(layer.idt ? torch::empty({q, layer.out}, s.options()) : torch::Tensor());
    scratch.inputs[l] = inputs.back().data_ptr<R>();
    scratch.zbar[l] = zbar.back().data_ptr<R>();
    scratch.idt_share[l] = layer.idt ? idt_share.back().data_ptr<R>() : nullptr;
  }
  EmbeddingGradients out;
  out.inputs = torch::empty({q}, s.options());
  if (s.device().is_cpu()) {
    host_fused_embedding_adjoint(fused, s.data_ptr<R>(), s.stride(0), q, value_bar.data_ptr<R>(),
                                 slope_bar.data_ptr<R>(), scratch, out.inputs.data_ptr<R>());
  } else {
#ifdef MLIP_HAVE_CUDA_KERNELS
    if (!s.device().is_cuda()) no_kernels_for(s);
    const c10::cuda::CUDAGuard guard(s.device());
    launch_fused_embedding_adjoint(fused, s.data_ptr<R>(), s.stride(0), q, value_bar.data_ptr<R>(),
                                   slope_bar.data_ptr<R>(), scratch, out.inputs.data_ptr<R>(), stream_of(s));
#else
    no_kernels_for(s);
#endif
  }
  // d loss / dW = sum over pairs of x zb + xt ztb: rows of values and of derivatives alike.
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const Layer& layer = net.layers[l];
    out.weights.push_back(torch::matmul(inputs[l].view({2 * q, layer.in}).t(), zbar[l].view({2 * q, layer.out})));
    out.biases.push_back(zbar[l].select(1, 0).sum(0));
    out.timesteps.push_back(layer.idt ? idt_share[l].sum(0) : torch::Tensor());
  }
  return out;
}

}  // namespace

EmbeddingOutputs fused_embedding(const torch::Tensor& s, const EmbeddingNetParameters& net) {
  check_inputs(s);
  return s.scalar_type() == torch::kFloat64 ? run<double>(s, net) : run<float>(s, net);
}

EmbeddingGradients fused_embedding_adjoint(const torch::Tensor& s, const EmbeddingNetParameters& net,
                                           const torch::Tensor& grad_value, const torch::Tensor& grad_slope) {
  check_inputs(s);
  return s.scalar_type() == torch::kFloat64 ? run_adjoint<double>(s, net, grad_value, grad_slope)
                                            : run_adjoint<float>(s, net, grad_value, grad_slope);
}

bool fused_kernels_compiled() { return cuda_kernels_compiled(); }

}  // namespace mlip::models
