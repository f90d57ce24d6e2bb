#include "potential_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "archive/model_archive.h"
#include "md/potential.h"
#include "model_test_util.h"
#include "models/equivariant/equivariant.h"
#include "models/equivariant/equivariant_model.h"
#include "models/registry.h"
#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_model.h"

namespace mlip::test {

// The docs of these are in potential_test_util.h.
double write_frozen(const std::string& path, const std::string& model_yaml, bool poisoned) {
  const std::string config = "model:\n" + model_yaml;
  auto settings = models::parse_model_settings(config, "test input");
  torch::jit::Module module;
  const auto dtype = settings->dtype();
  if (settings->type == "se_e2_a") {
    models::SeAConfig c = dynamic_cast<const models::SeASettings&>(*settings).config;
    c.sel = dynamic_cast<const models::SeASettings&>(*settings).sel.values;
    c.pair_repulsion = settings->pair_repulsion;
    c.long_range = settings->long_range;
    module = models::build_se_e2_a(c);
    module.setattr("davg", torch::tensor({0.1, 0.0, 0.0, 0.0, 0.12, 0.0, 0.0, 0.0}, torch::kFloat64).reshape({2, 4}).to(dtype));
    module.setattr("dstd", torch::tensor({0.4, 0.3, 0.3, 0.3, 0.5, 0.35, 0.35, 0.35}, torch::kFloat64).reshape({2, 4}).to(dtype));
    module.setattr("bias", torch::tensor({-3.0, -1.5}, torch::kFloat64).to(dtype));
  } else {
    models::EquivariantConfig c = dynamic_cast<const models::EquivariantSettings&>(*settings).config;
    c.pair_repulsion = settings->pair_repulsion;
    c.long_range = settings->long_range;
    module = models::build_equivariant(c);
    module.run_method("set_scale_shift", torch::tensor({1.3, 0.7}, torch::kFloat64), torch::tensor({-2.0, -0.5}, torch::kFloat64));
  }
  for (const auto& p : module.parameters()) p.requires_grad_(false);
  if (poisoned) (*module.parameters().begin()).fill_(std::numeric_limits<double>::quiet_NaN());
  archive::ExtraFiles extra = {{"r_max", std::to_string(settings->cutoff())},
                             {"type_names", "O H"},
                             {"num_types", "2"},
                             {"model_dtype", settings->precision},
                             {"model_type", settings->type},
                             {"mlip_version", "test"},
                             {"config", config},
                             {"units", "eV Angstrom"}};
  // As `mlip freeze` writes them (frozen/freeze.cpp): MD rebuilds the model from the record.
  extra["capabilities"] = models::capabilities_of(*settings).to_text();
  extra["inference_settings"] = models::inference_record(*settings, module).to_text();
  archive::save_module_atomically(module, extra, path, "the model");
  return settings->cutoff();
}

std::string se_yaml(const std::string& precision) {
  return "  type_map: [O, H]\n"
         "  descriptor: {type: se_e2_a, sel: [12, 24], rcut: 3.5, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4,"
         " precision: " + precision + ", seed: 3}\n"
         "  fitting_net: {neuron: [8, 8], precision: " + precision + ", seed: 4}\n";
}

std::string equivariant_yaml(const std::string& precision) {
  return "  type: equivariant\n  type_map: [O, H]\n  r_max: 3.0\n  num_features: 4\n  l_max: 1\n"
         "  num_layers: 2\n  avg_num_neighbors: 8\n  precision: " + precision + "\n  seed: 5\n";
}


RankAtoms rank_atoms(const Frame& f, const std::vector<int64_t>& owned, bool images) {
  RankAtoms r;
  auto add = [&](int64_t i, int a, int b, int c) {
    for (int d = 0; d < 3; ++d)
      r.pos.push_back(f.pos[size_t(i * 3 + d)] +
                      (a || b || c ? a * f.cell[size_t(d)] + b * f.cell[size_t(3 + d)] + c * f.cell[size_t(6 + d)] : 0.0));
    r.types.push_back(f.types[size_t(i)]);
    r.owner.push_back(i);
  };
  std::vector<char> is_owned(size_t(f.natoms()), 0);
  for (int64_t i : owned) add(i, 0, 0, 0), is_owned[size_t(i)] = 1;
  r.nlocal = int64_t(owned.size());
  for (int64_t i = 0; i < f.natoms(); ++i)
    if (!is_owned[size_t(i)]) add(i, 0, 0, 0);
  for (int a = -1; a <= 1; ++a)
    for (int b = -1; b <= 1; ++b)
      for (int c = -1; c <= 1; ++c)
        if (images && (a || b || c))
          for (int64_t i = 0; i < f.natoms(); ++i) add(i, a, b, c);
  return r;
}

std::vector<double> fold(const std::vector<double>& rows, const std::vector<int64_t>& owner, int64_t natoms, int width) {
  std::vector<double> folded(size_t(natoms * width), 0.0);
  for (size_t k = 0; k < owner.size() && (k + 1) * size_t(width) <= rows.size(); ++k)
    for (int c = 0; c < width; ++c) folded[size_t(owner[k] * width + c)] += rows[k * size_t(width) + size_t(c)];
  return folded;
}

std::pair<double, double> max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    diff = std::max(diff, std::abs(a[k] - b[k]));
    scale = std::max(scale, std::abs(b[k]));
  }
  return {diff, scale};
}

void check_against_forward(const std::string& model_path, double r_max, md::Evaluation evaluation, double tol,
                           bool ids) {
  md::Potential potential(model_path, "cpu", evaluation);
  const Frame f = random_frame(40, true, 7, 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
  ASSERT_GE(9.5 - 1.0, potential.ghost_cutoff()) << "the images in [-1, 1]^3 must cover the ghost cutoff";
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(model_path, extra);
  const auto dtype = extra["model_dtype"] == "float32" ? torch::kFloat32 : torch::kFloat64;
  const ModelResult ref = run_deploy(module, f, r_max, dtype);

  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < f.natoms(); ++i) (i % 3 == 0 ? first : second).push_back(i);
  double energy = 0;
  std::vector<double> forces(size_t(f.natoms()) * 3, 0.0), virial(9, 0.0), atom_virial_sum(9, 0.0);
  for (const auto* owned : {&first, &second}) {
    const RankAtoms r = rank_atoms(f, *owned);
    md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
    if (ids) atoms.ids = r.owner.data();
    md::Results out;
    potential.compute(atoms, true, true, out);
    energy += out.energy;
    double atomic_sum = 0;
    for (double e : out.atomic_energy) atomic_sum += e;
    EXPECT_NEAR(atomic_sum, out.energy, 1e-9 * std::abs(out.energy)) << "per-atom energies sum to the energy";
    for (size_t k = 0; k < r.owner.size(); ++k)
      for (int d = 0; d < 3; ++d) forces[size_t(r.owner[k] * 3 + d)] += out.forces[k * 3 + size_t(d)];
    for (int k = 0; k < 9; ++k) virial[size_t(k)] += out.virial[size_t(k)];
    for (size_t k = 0; k < r.owner.size(); ++k)
      for (int c = 0; c < 9; ++c) atom_virial_sum[size_t(c)] += out.atom_virial[k * 9 + size_t(c)];
  }
  EXPECT_NEAR(energy, ref.energy, tol * std::abs(ref.energy));
  const double fscale = ref.forces.abs().max().item<double>();
  const auto rf = ref.forces.contiguous();
  for (int64_t k = 0; k < f.natoms() * 3; ++k)
    ASSERT_NEAR(forces[size_t(k)], rf.data_ptr<double>()[k], tol * fscale) << "force component " << k;
  const double vscale = ref.virial.abs().max().item<double>();
  const auto rv = ref.virial.contiguous();
  for (int k = 0; k < 9; ++k) {
    EXPECT_NEAR(virial[size_t(k)], rv.data_ptr<double>()[k], tol * vscale) << "virial " << k;
    EXPECT_NEAR(atom_virial_sum[size_t(k)], rv.data_ptr<double>()[k], tol * vscale) << "per-atom virials, sum " << k;
  }
}

}  // namespace mlip::test
