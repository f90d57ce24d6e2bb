#include "models/torchscript_inference.h"

#include <algorithm>

#include "error.h"

namespace mlip::models {
namespace {

/// A float64 host tensor [rows, 3] viewing `data` (not copied: from_blob).
torch::Tensor rows_of(const double* data, int64_t rows) {
  return torch::from_blob(const_cast<double*>(data), {rows, 3}, torch::kFloat64);
}

/// forward()'s input dictionary (docs/deploy.md "Interface") of a graph given by positions.
c10::Dict<std::string, torch::Tensor> forward_input(const AtomGraph& g, torch::Device device, torch::Dtype dtype) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const auto real = torch::TensorOptions().dtype(dtype).device(device);
  c10::Dict<std::string, torch::Tensor> input;
  input.insert("pos", rows_of(g.positions, g.nodes).to(device, dtype));
  input.insert("atom_types", torch::from_blob(const_cast<int64_t*>(g.types), {g.nodes}, i64).to(device));
  torch::Tensor edge_index = torch::empty({2, g.npairs}, i64);
  if (g.npairs > 0) {
    std::copy(g.centre, g.centre + g.npairs, edge_index.data_ptr<int64_t>());
    std::copy(g.neighbour, g.neighbour + g.npairs, edge_index.data_ptr<int64_t>() + g.npairs);
  }
  input.insert("edge_index", edge_index.to(device));
  // Without a cell the shifts are displacements in Å (the identity cell, as MD gives them).
  if (g.cell != nullptr)
    input.insert("cell", torch::from_blob(const_cast<double*>(g.cell), {3, 3}, torch::kFloat64).to(device, dtype));
  else
    input.insert("cell", torch::eye(3, real));
  input.insert("edge_cell_shift", g.shifts != nullptr && g.npairs > 0 ? rows_of(g.shifts, g.npairs).to(device, dtype)
                                                                     : torch::zeros({g.npairs, 3}, real));
  if (g.pbc != nullptr)
    input.insert("pbc", torch::tensor({int64_t(g.pbc[0]), int64_t(g.pbc[1]), int64_t(g.pbc[2])}, i64).to(device));
  // Only the owned atoms' energies count; a graph of owned atoms only needs no mask.
  if (g.nlocal < g.nodes) input.insert("nlocal", torch::tensor(g.nlocal, i64));
  return input;
}

/// A float64 host copy of the values of output `key` into `out` (count values).
void read_output(const c10::impl::GenericDict& result, const char* key, int64_t count, std::vector<double>& out) {
  const torch::Tensor t = result.at(key).toTensor().to(torch::kCPU, torch::kFloat64).contiguous();
  if (t.numel() < count)
    throw Error(std::string("TorchScript forward: output '") + key + "' has " + std::to_string(t.numel()) +
                " values, expected " + std::to_string(count));
  out.assign(t.data_ptr<double>(), t.data_ptr<double>() + count);
}

}  // namespace

TorchScriptInference::TorchScriptInference(torch::jit::Module module, torch::Device device, torch::Dtype dtype,
                                           double cutoff)
    : module_(std::move(module)), device_(device), dtype_(dtype), cutoff_(cutoff) {}

InferenceInputs TorchScriptInference::inputs() const {
  InferenceInputs in;
  in.graph = true;
  return in;
}

InferenceResult TorchScriptInference::evaluate(const Request& request) {
  const AtomGraph* graph = request.graph;
  if (graph == nullptr || request.exchange != nullptr || request.neighbors != nullptr) refuse(request);
  if (graph->positions == nullptr && graph->nodes > 0)
    throw Error(describe() + ": the graph has no positions (forward needs them)");
  const auto result = module_.forward({forward_input(*graph, device_, dtype_)}).toGenericDict();
  InferenceResult r;
  std::vector<double> energy;
  read_output(result, "total_energy", 1, energy);
  r.energy = energy[0];
  read_output(result, "forces", graph->nodes * 3, r.forces);
  std::vector<double> virial;
  read_output(result, "virial", 9, virial);
  std::copy(virial.begin(), virial.end(), r.virial.begin());
  if (request.outputs.atomic_energy) read_output(result, "atomic_energy", graph->nlocal, r.atomic);
  if (request.outputs.pair_gradient) read_output(result, "edge_gradient", graph->npairs * 3, r.pair_gradient);
  if (request.outputs.charges && result.contains("charges")) read_output(result, "charges", graph->nodes, r.charges);
  return r;
}

}  // namespace mlip::models
