#include "md/potential.h"

#include <torch/script.h>

#include <ATen/Context.h>

#include <chrono>
#include <sstream>

#include "data/neighbor_list.h"
#include "error.h"
#include "models/deploy_source.h"
#include "models/env_matrix.h"
#include "models/model.h"
#include "models/se_e2_a_model.h"
#include "models/se_e2_a_training.h"
#include "train/checkpoint.h"
#include "train/config.h"

namespace mlip::md {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

torch::Device parse_device(const std::string& path, const std::string& device) {
  if (device == "cpu") return torch::kCPU;
  if (device.rfind("cuda", 0) == 0) {
    torch::Device d = torch::kCPU;
    try {
      d = torch::Device(device);
    } catch (const c10::Error&) {
      throw Error(path + ": device: expected cpu, cuda or cuda:K, got \"" + device + "\"");
    }
    if (!at::hasCUDA())
      throw Error(path + ": device " + device +
                  ": this build of LibTorch has no CUDA support (use device cpu, or build mlip against a CUDA LibTorch)");
    return d;
  }
  throw Error(path + ": device: expected cpu, cuda or cuda:K, got \"" + device + "\"");
}

/// For a message-passing model: which atoms are centres. An owned atom's energy needs the
/// features of every atom within L - 1 hops of it (through pairs within the cutoff), and each of
/// those needs its own pairs: hop[i] <= L - 1 marks a centre (docs/lammps.md "Several ranks").
template <typename Real>
std::vector<char> centres_within_hops(const data::NeighborList<Real>& nl, int64_t nlocal, int64_t layers) {
  const int64_t n = nl.natoms;
  std::vector<int64_t> hop(size_t(n), -1);
  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  std::vector<int64_t> frontier;
  for (int64_t i = 0; i < nlocal; ++i) hop[size_t(i)] = 0, frontier.push_back(i);
  for (int64_t k = 1; k < layers; ++k) {
    std::vector<int64_t> next;
    for (int64_t i : frontier)
      for (int64_t p = offsets(i); p < offsets(i + 1); ++p) {
        const int64_t j = neighbor(p);
        if (hop[size_t(j)] < 0) hop[size_t(j)] = k, next.push_back(j);
      }
    frontier.swap(next);
  }
  std::vector<char> centre(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) centre[size_t(i)] = hop[size_t(i)] >= 0;
  return centre;
}

}  // namespace

struct Potential::Impl {
  std::string path;
  torch::Device device = torch::kCPU;
  torch::jit::Module module;
  std::shared_ptr<const models::ModelSettings> settings;
  std::vector<std::string> type_names;
  std::string model_type, dtype_name;
  torch::Dtype dtype = torch::kFloat64;
  double r_max = 0;
  int64_t layers = 1;
  Evaluation evaluation = Evaluation::kTorchScript;
  // se_e2_a's hand-written inference (Evaluation::kAuto on the CPU).
  std::unique_ptr<models::SeATrainingPath> se_path;
  models::SeAConfig se_config;
  data::NeighborListBuilder<double> builder_double;
  data::NeighborListBuilder<float> builder_float;
  Timings timings;

  template <typename Real>
  data::NeighborListBuilder<Real>& builder() {
    if constexpr (std::is_same_v<Real, float>) return builder_float;
    else return builder_double;
  }

  void load(const std::string& file, const std::string& device_name, Evaluation wanted);
  template <typename Real>
  void compute_se_e2_a(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out);
  template <typename Real>
  void compute_torchscript(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out);
};

void Potential::Impl::load(const std::string& file, const std::string& device_name, Evaluation wanted) {
  path = file;
  device = parse_device(path, device_name);
  train::ExtraFiles extra;
  module = train::load_model(path, extra);  // names the file when it is not an mlip model
  if (extra.count("step") != 0 || extra.count("optimizer") != 0)
    throw Error(path + ": a training checkpoint; MD needs a frozen model (mlip freeze -c <checkpoint> -o model.pt)");
  for (const char* key : {"r_max", "type_names", "model_dtype", "config"})
    if (extra.count(key) == 0) throw Error(path + ": the frozen model lacks its '" + std::string(key) + "' metadata");
  if (!module.find_method("deploy_interface") ||
      module.run_method("deploy_interface").toInt() < models::kDeployInterface)
    throw Error(path + ": frozen by an older mlip whose models cannot leave ghost atoms out of the energy; freeze "
                "it again (mlip freeze) from a checkpoint trained with this version");
  type_names = split_words(extra["type_names"]);
  model_type = extra["model_type"];
  dtype_name = extra["model_dtype"];
  if (dtype_name != "float64" && dtype_name != "float32")
    throw Error(path + ": model_dtype: expected float64 or float32, got \"" + dtype_name + "\"");
  dtype = dtype_name == "float32" ? torch::kFloat32 : torch::kFloat64;
  r_max = std::stod(extra["r_max"]);
  settings = train::parse_model_settings(extra["config"], path + " (its training input)");
  layers = settings->message_layers();
  module.eval();
  module.to(device);

  evaluation = Evaluation::kTorchScript;
  if (wanted == Evaluation::kAuto && model_type == "se_e2_a" && device.is_cpu()) {
    se_config = dynamic_cast<const models::SeASettings&>(*settings).config;
    const torch::Tensor sel = module.attr("sel").toTensor().to(torch::kCPU).contiguous();
    se_config.sel.assign(sel.data_ptr<int64_t>(), sel.data_ptr<int64_t>() + sel.numel());
    se_path = std::make_unique<models::SeATrainingPath>(se_config, module);
    evaluation = Evaluation::kAuto;
  }
}

template <typename Real>
void Potential::Impl::compute_se_e2_a(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out) {
  const auto t0 = Clock::now();
  std::vector<Real> pos(atoms.positions, atoms.positions + atoms.natoms * 3);
  std::vector<int> types(atoms.types, atoms.types + atoms.natoms);
  models::EnvMatrix env;
  {
    const auto nl = builder<Real>().build(pos.data(), atoms.natoms, nullptr, {false, false, false}, se_config.rcut,
                                          atoms.nlocal);
    env = models::compute_env_matrix<Real>(nl, types, {se_config.rcut, se_config.rcut_smth, se_config.sel});
  }
  types.resize(size_t(atoms.nlocal));
  const models::PackedEnv packed = models::PackedEnv::pack(env, types, se_config);
  env = models::EnvMatrix();
  const auto t1 = Clock::now();
  timings.neighbor_list += std::chrono::duration<double>(t1 - t0).count();
  models::SeATrainingPath::Evaluation e = se_path->evaluate(packed, types, atoms.natoms, atom_virial);
  out.energy = e.energy;
  out.forces = std::move(e.forces);
  out.virial = e.virial;
  if (atomic_energy) out.atomic_energy = std::move(e.atomic);
  if (atom_virial) out.atom_virial = std::move(e.atom_virial);
  timings.model += seconds_since(t1);
}

template <typename Real>
void Potential::Impl::compute_torchscript(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial,
                                          Results& out) {
  const auto t0 = Clock::now();
  const int64_t n = atoms.natoms;
  std::vector<Real> pos(atoms.positions, atoms.positions + n * 3);
  // Pairs: centres are the owned atoms (L = 1) or every atom within L - 1 hops of one.
  std::vector<int64_t> centre, neighbour;
  {
    const auto nl = builder<Real>().build(pos.data(), n, nullptr, {false, false, false}, r_max,
                                          layers == 1 ? atoms.nlocal : n);
    auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
    auto nbr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
    const std::vector<char> is_centre =
        layers == 1 ? std::vector<char>(size_t(nl.natoms), 1) : centres_within_hops(nl, atoms.nlocal, layers);
    for (int64_t i = 0; i < nl.natoms; ++i) {
      if (!is_centre[size_t(i)]) continue;
      for (int64_t p = offsets(i); p < offsets(i + 1); ++p) centre.push_back(i), neighbour.push_back(nbr(p));
    }
  }
  const int64_t npairs = int64_t(centre.size());
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  c10::Dict<std::string, torch::Tensor> input;
  input.insert("pos", torch::from_blob(const_cast<double*>(atoms.positions), {n, 3}, torch::kFloat64).to(device, dtype));
  std::vector<int64_t> types(atoms.types, atoms.types + n);
  input.insert("atom_types", torch::tensor(types, i64).to(device));
  input.insert("edge_index", torch::stack({torch::tensor(centre, i64), torch::tensor(neighbour, i64)}).to(device));
  input.insert("cell", torch::zeros({3, 3}, torch::TensorOptions().dtype(dtype).device(device)));
  input.insert("edge_cell_shift", torch::zeros({npairs, 3}, torch::TensorOptions().dtype(dtype).device(device)));
  input.insert("nlocal", torch::tensor(atoms.nlocal, i64));
  const auto t1 = Clock::now();
  timings.neighbor_list += std::chrono::duration<double>(t1 - t0).count();

  const auto result = module.forward({input}).toGenericDict();
  auto get = [&](const char* key) -> torch::Tensor {
    return result.at(key).toTensor().to(torch::kCPU, torch::kFloat64).contiguous();
  };
  const torch::Tensor energy = get("total_energy");
  out.energy = energy.data_ptr<double>()[0];
  const torch::Tensor forces = get("forces");
  out.forces.assign(forces.data_ptr<double>(), forces.data_ptr<double>() + n * 3);
  const torch::Tensor virial = get("virial");
  std::copy(virial.data_ptr<double>(), virial.data_ptr<double>() + 9, out.virial.begin());
  if (atomic_energy) {
    const torch::Tensor e = get("atomic_energy");
    out.atomic_energy.assign(e.data_ptr<double>(), e.data_ptr<double>() + atoms.nlocal);
  }
  if (atom_virial) {
    const torch::Tensor g = get("edge_gradient");
    const double* gp = g.data_ptr<double>();
    const double* x = atoms.positions;
    out.atom_virial.assign(size_t(n) * 9, 0.0);
    for (int64_t p = 0; p < npairs; ++p) {
      const int64_t i = centre[size_t(p)], j = neighbour[size_t(p)];
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          const double w = -0.5 * (x[j * 3 + a] - x[i * 3 + a]) * gp[p * 3 + b];
          out.atom_virial[size_t(i * 9 + a * 3 + b)] += w;
          out.atom_virial[size_t(j * 9 + a * 3 + b)] += w;
        }
    }
  }
  timings.model += seconds_since(t1);
}

Potential::Potential(const std::string& path, const std::string& device, Evaluation evaluation)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(path, device, evaluation);
}

Potential::~Potential() = default;

const std::vector<std::string>& Potential::type_names() const { return impl_->type_names; }
const std::string& Potential::model_type() const { return impl_->model_type; }
const std::string& Potential::dtype() const { return impl_->dtype_name; }
double Potential::cutoff() const { return impl_->r_max; }
int64_t Potential::message_layers() const { return impl_->layers; }
const Timings& Potential::timings() const { return impl_->timings; }

std::string Potential::describe() const {
  std::ostringstream o;
  o << impl_->model_type << " (" << impl_->dtype_name << ", r_max " << impl_->r_max << " Å";
  if (impl_->layers > 1) o << ", " << impl_->layers << " layers";
  o << ") on " << impl_->device.str() << ", "
    << (impl_->se_path ? "hand-written se_e2_a inference" : "TorchScript forward");
  return o.str();
}

void Potential::compute(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out) {
  if (atoms.nlocal < 0 || atoms.nlocal > atoms.natoms) throw Error("MD atoms: owned atoms out of range");
  const int64_t ntypes = int64_t(impl_->type_names.size());
  for (int64_t i = 0; i < atoms.natoms; ++i)
    if (atoms.types[i] < 0 || atoms.types[i] >= ntypes)
      throw Error("MD atoms: atom " + std::to_string(i) + " has model type " + std::to_string(atoms.types[i]) +
                  ", expected 0.." + std::to_string(ntypes - 1));
  out = Results();
  const bool f32 = impl_->dtype == torch::kFloat32;
  if (impl_->se_path) {
    if (f32) impl_->compute_se_e2_a<float>(atoms, atomic_energy, atom_virial, out);
    else impl_->compute_se_e2_a<double>(atoms, atomic_energy, atom_virial, out);
  } else {
    if (f32) impl_->compute_torchscript<float>(atoms, atomic_energy, atom_virial, out);
    else impl_->compute_torchscript<double>(atoms, atomic_energy, atom_virial, out);
  }
  ++impl_->timings.calls;
}

}  // namespace mlip::md
