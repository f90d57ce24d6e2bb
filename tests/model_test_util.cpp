#include "model_test_util.h"

#include "data/neighbor_list.h"
#include "models/pair_list.h"

namespace mlip::test {

c10::Dict<std::string, torch::Tensor> deploy_input(const Frame& f, double rcut, torch::Dtype dtype) {
  const auto pairs = models::pair_list(data::build_neighbor_list<double>(
      f.pos.data(), f.natoms(), f.cell.empty() ? nullptr : f.cell.data(), f.pbc, rcut));
  c10::Dict<std::string, torch::Tensor> d;
  d.insert("pos", torch::tensor(f.pos, torch::kFloat64).reshape({-1, 3}).to(dtype));
  d.insert("atom_types", torch::tensor(std::vector<int64_t>(f.types.begin(), f.types.end()), torch::kInt64));
  d.insert("edge_index", pairs.edge_index());
  d.insert("cell", (f.cell.empty() ? torch::zeros({3, 3}, torch::kFloat64)
                                   : torch::tensor(f.cell, torch::kFloat64).reshape({3, 3}))
                       .to(dtype));
  d.insert("edge_cell_shift", pairs.shift.to(dtype));
  const bool periodic = !f.cell.empty();
  d.insert("pbc", torch::tensor({int64_t(periodic && f.pbc[0]), int64_t(periodic && f.pbc[1]),
                                 int64_t(periodic && f.pbc[2])}, torch::kInt64));
  return d;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.to(torch::kFloat64).abs().max().item<double>();
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

std::vector<torch::Tensor> parameter_grads(torch::jit::Module& module) {
  std::vector<torch::Tensor> g;
  for (const auto& p : module.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

void zero_grads(torch::jit::Module& module) {
  for (auto p : module.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

ModelResult run_deploy(torch::jit::Module& model, const Frame& f, double rcut, torch::Dtype dtype) {
  auto out = model.forward({deploy_input(f, rcut, dtype)}).toGenericDict();
  ModelResult r;
  r.energy = out.at("total_energy").toTensor().item<double>();
  r.forces = out.at("forces").toTensor().to(torch::kFloat64);
  r.virial = out.at("virial").toTensor().to(torch::kFloat64).reshape({3, 3});
  if (out.contains("charges")) r.charges = out.at("charges").toTensor().to(torch::kFloat64).reshape({-1});
  return r;
}

torch::Tensor random_rotation(std::mt19937& rng, bool reflect) {
  std::normal_distribution<double> g(0, 1);
  auto m = torch::empty({3, 3}, torch::kFloat64);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) m[a][b] = g(rng);
  auto q = std::get<0>(torch::linalg_qr(m));
  if (q.det().item<double>() < 0) q = -q;
  if (reflect) q = q.matmul(torch::diag(torch::tensor({1.0, 1.0, -1.0}, torch::kFloat64)));
  return q;
}

std::vector<double> transform(const std::vector<double>& v, const torch::Tensor& rot) {
  if (v.empty()) return v;
  auto t = torch::tensor(v, torch::kFloat64).reshape({-1, 3}).matmul(rot.t()).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace mlip::test
