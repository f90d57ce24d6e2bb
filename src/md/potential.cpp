#include "md/potential.h"

#include <torch/script.h>

#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "archive/model_archive.h"
#include "data/neighbor_list.h"
#include "data/overlap.h"
#include "error.h"
#include "md/device_graph.h"
#include "md/long_range_term.h"
#include "models/capabilities.h"
#include "models/deploy_source.h"
#include "models/inference.h"
#include "models/inference_registry.h"
#include "models/long_range/long_range.h"
#include "models/module_device.h"
#include "models/repulsion_inference.h"
#include "models/torchscript_inference.h"

namespace mlip::md {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The name of MD atom `row` in messages: its id (LAMMPS' tag) when there are ids.
std::string atom_name(const LocalAtoms& atoms, int64_t row) {
  if (atoms.ids != nullptr) return "id " + std::to_string(atoms.ids[row]);
  return "index " + std::to_string(row);
}

/// Two MD atoms on top of each other (rows `first` and `second` of `atoms`, `distance` Å apart):
/// no model has a finite energy there (docs/lammps.md "Errors").
[[noreturn]] void throw_overlap(const LocalAtoms& atoms, int64_t first, int64_t second, double distance) {
  auto id = [&](int64_t r) { return atoms.ids != nullptr ? atoms.ids[r] : r; };
  if (id(first) > id(second)) std::swap(first, second);
  std::ostringstream m;
  m << "MD atoms: atoms " << atom_name(atoms, first) << " and " << atom_name(atoms, second) << " are " << distance
    << " Å apart, expected at least " << data::kOverlapDistance
    << " Å: atoms on top of each other have no finite energy (check the data file or the previous steps)";
  throw Error(m.str());
}

/// The host neighbour list's closest pair, when two atoms overlap: throw_overlap.
template <typename Real>
void check_no_overlap(const data::NeighborList<Real>& list, const LocalAtoms& atoms,
                      const std::vector<int64_t>* row_of_position) {
  const auto overlap = data::find_overlap(list);
  if (!overlap) return;
  auto row = [&](int64_t k) { return row_of_position ? (*row_of_position)[size_t(k)] : k; };
  throw_overlap(atoms, row(overlap->i), row(overlap->j), overlap->distance);
}

/// A model's energy and forces must be finite (docs/lammps.md "Errors"): an error naming the
/// first atom with a non-finite force.
void check_finite(const LocalAtoms& atoms, const Results& out) {
  int64_t bad = -1;
  for (size_t k = 0; k < out.forces.size() && bad < 0; ++k)
    if (!std::isfinite(out.forces[k])) bad = int64_t(k / 3);
  if (std::isfinite(out.energy) && bad < 0) return;
  std::ostringstream m;
  m << "MD atoms: the model's energy is " << out.energy;
  if (bad >= 0) m << " and the force on atom " << atom_name(atoms, bad) << " is not finite";
  m << " (" << atoms.nlocal << " owned atoms, " << atoms.natoms - atoms.nlocal
    << " ghosts; positions finite, no two atoms overlap): the model fails on this structure";
  throw Error(m.str());
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

/// The graph the frozen forward gets from an MD rank's atoms (docs/lammps.md "The graph of a
/// rank"): one node per distinct atom, the owned atoms first (nodes [0, nlocal)). A ghost that
/// images an atom already present (same id: a periodic image of an owned atom, or a second image
/// of another rank's atom) is not a node of its own: its pairs point at that atom's node with the
/// ghost's displacement as shift. Centres are the nodes within layers - 1 hops of an owned atom.
struct RankGraph {
  std::vector<int64_t> row_of_node;  ///< [nodes] the atom row standing for each node
  std::vector<int64_t> centre;       ///< [pairs] node of the centre i
  std::vector<int64_t> neighbour;    ///< [pairs] node of the neighbour j
  std::vector<double> shift;         ///< [pairs * 3] Å: x[row of j in the pair] - x[row_of_node[j]]
};

/// The rows in the order the neighbour list needs them: those that may be centres first (owned
/// atoms, then, for layers > 1, ghosts whose id no owned atom has), then the other ghosts.
struct RowOrder {
  std::vector<int64_t> rows;  ///< [natoms] original row of each position in the order
  int64_t centres = 0;        ///< rows[0, centres) may be centres
};

RowOrder order_rows(const LocalAtoms& atoms, const std::vector<int64_t>& ids, int64_t layers,
                    const std::unordered_map<int64_t, int64_t>& owned_node) {
  RowOrder o;
  o.rows.reserve(size_t(atoms.natoms));
  for (int64_t i = 0; i < atoms.nlocal; ++i) o.rows.push_back(i);
  std::vector<int64_t> images;
  for (int64_t i = atoms.nlocal; i < atoms.natoms; ++i)
    (layers > 1 && owned_node.count(ids[size_t(i)]) == 0 ? o.rows : images).push_back(i);
  o.centres = int64_t(o.rows.size());
  o.rows.insert(o.rows.end(), images.begin(), images.end());
  return o;
}

template <typename Real>
RankGraph rank_graph(const LocalAtoms& atoms, const std::vector<int64_t>& ids, int64_t layers, double r_max,
                     data::NeighborListBuilder<Real>& builder) {
  std::unordered_map<int64_t, int64_t> node_of_id;
  RankGraph g;
  for (int64_t i = 0; i < atoms.nlocal; ++i) {
    if (!node_of_id.emplace(ids[size_t(i)], i).second)
      throw Error("MD atoms: atom id " + std::to_string(ids[size_t(i)]) + " is owned twice");
    g.row_of_node.push_back(i);
  }
  const RowOrder order = order_rows(atoms, ids, layers, node_of_id);
  const int64_t n = atoms.natoms;
  std::vector<Real> pos(size_t(n) * 3);
  std::vector<int64_t> slot_of_row(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = order.rows[size_t(k)];
    slot_of_row[size_t(row)] = k;
    for (int d = 0; d < 3; ++d) pos[size_t(k * 3 + d)] = Real(atoms.positions[row * 3 + d]);
  }
  const auto nl = builder.build(pos.data(), n, nullptr, {false, false, false}, r_max, order.centres);
  check_no_overlap(nl, atoms, &order.rows);
  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  auto nbr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);

  // Breadth first from the owned atoms: the nodes of hop k - 1 are the centres of round k.
  std::vector<int64_t> frontier(size_t(atoms.nlocal));
  for (int64_t i = 0; i < atoms.nlocal; ++i) frontier[size_t(i)] = i;
  const double* x = atoms.positions;
  for (int64_t k = 1; k <= layers && !frontier.empty(); ++k) {
    std::vector<int64_t> next;
    for (int64_t node_c : frontier) {
      const int64_t slot = slot_of_row[size_t(g.row_of_node[size_t(node_c)])];
      if (slot >= order.centres) throw Error("MD atoms: internal error: a centre without neighbours");
      for (int64_t p = offsets(slot); p < offsets(slot + 1); ++p) {
        const int64_t j = order.rows[size_t(nbr(p))];
        auto [it, added] = node_of_id.emplace(ids[size_t(j)], int64_t(g.row_of_node.size()));
        if (added) {
          if (k < layers) next.push_back(it->second);
          g.row_of_node.push_back(j);
        }
        const int64_t rep = g.row_of_node[size_t(it->second)];
        g.centre.push_back(node_c);
        g.neighbour.push_back(it->second);
        for (int d = 0; d < 3; ++d) g.shift.push_back(x[j * 3 + d] - x[rep * 3 + d]);
      }
    }
    frontier.swap(next);
  }
  return g;
}

}  // namespace

struct Potential::Impl {
  std::string path;
  torch::Device device = torch::kCPU;
  torch::jit::Module module;
  std::vector<std::string> type_names;
  std::string model_type, dtype_name;
  torch::Dtype dtype = torch::kFloat64;
  double r_max = 0;
  int64_t layers = 1;
  // The model's own inference (Evaluation::kAuto on the CPU, where its registry entry has one),
  // else its TorchScript forward (models/torchscript_inference.h).
  std::unique_ptr<models::Inference> inference;
  // model.long_range (docs/lammps.md "Long range across ranks"): its settings and how its periodic
  // sum is computed.
  models::LongRangeSettings long_range;
  LongRangeSolver solver = LongRangeSolver::kAuto;
  LongRangeCache long_range_cache;
  // The TorchScript forward's graph built on the device (build_device_graph), not the host.
  bool device_pairs = false;
  data::NeighborListBuilder<double> builder_double;
  data::NeighborListBuilder<float> builder_float;
  Timings timings;

  template <typename Real>
  data::NeighborListBuilder<Real>& builder() {
    if constexpr (std::is_same_v<Real, float>) return builder_float;
    else return builder_double;
  }

  void load(const std::string& file, const std::string& device_name, Evaluation wanted, PairBuilding pairs);
  /// Refuses capabilities that contradict the other metadata or the device asked for.
  void check_capabilities(const models::Capabilities& caps, archive::ExtraFiles& extra) const;
  template <typename Real>
  void compute_own(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out);
  /// The rank's graph (docs/lammps.md "The graph of a rank") through the model's own graph
  /// inference or, without one, the TorchScript forward. exchanged: one hop, with the layers'
  /// features of ghosts exchanged through atoms.exchange (docs/lammps.md "Features exchanged
  /// between ranks").
  template <typename Real>
  void compute_graph(const LocalAtoms& atoms, bool exchanged, bool atomic_energy, bool atom_virial, Results& out);
  /// A graph through the inference (with the exchange when given); forces, virials and per-atom
  /// values onto the rows of `atoms`.
  void evaluate_graph(const RankGraph& g, const LocalAtoms& atoms, GhostExchange* exchange, bool atomic_energy,
                      bool atom_virial, Results& out);
  /// The rank's graph built on the device (docs/lammps.md "Pairs on the device") through the
  /// TorchScript forward; only forces, energy and virial (and the asked per-atom values) come back.
  void compute_on_device(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out);
  /// The long-range term's part (this rank's atoms') added to the model's.
  void add_long_range(const LongRangeTerm& term, int64_t nlocal, bool atomic_energy, bool atom_virial,
                      Results& out) const;
};

void Potential::Impl::load(const std::string& file, const std::string& device_name, Evaluation wanted,
                           PairBuilding pairs) {
  path = file;
  device = parse_device(path, device_name);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such file (expected a model frozen by mlip freeze)");
  archive::ExtraFiles extra;
  module = archive::load_model(path, extra);  // names the file when it is not an mlip model
  if (extra.count("step") != 0 || extra.count("optimizer") != 0)
    throw Error(path + ": a training checkpoint; MD needs a frozen model (mlip freeze -c <checkpoint> -o model.pt)");
  for (const char* key : {"r_max", "type_names", "model_dtype", "config"})
    if (extra.count(key) == 0) throw Error(path + ": the frozen model lacks its '" + std::string(key) + "' metadata");
  if (!module.find_method("deploy_interface") ||
      module.run_method("deploy_interface").toInt() < models::kDeployInterface)
    throw Error(path + ": frozen by an older mlip whose models cannot leave ghost atoms out of the energy; freeze "
                "it again (mlip freeze) from a checkpoint trained with this version");
  type_names = archive::stored_type_names(extra);
  model_type = extra["model_type"];
  // The model's inference settings as frozen (docs/deploy.md "Inference settings"; read from
  // the training input stored in it only for models frozen before records existed, by the
  // model's own reader of that version's keys), and its capabilities: as frozen (docs/deploy.md
  // "Capabilities"), else derived from the record (models frozen before capabilities were written).
  const models::SettingsRecord record = models::frozen_settings(extra, path);
  const models::Capabilities caps = extra.count("capabilities") != 0
                                        ? models::Capabilities::parse(extra["capabilities"], path)
                                        : models::capabilities_from(record);
  check_capabilities(caps, extra);
  dtype_name = caps.dtype;
  dtype = dtype_name == "float32" ? torch::kFloat32 : torch::kFloat64;
  r_max = caps.cutoff;
  layers = caps.message_layers;
  module.eval();
  // Every tensor, plain attributes too (the equivariant scale and shift; docs/device.md "What lives
  // where"): Module::to moves only parameters and buffers.
  models::move_module(module, device);

  // A model with a pair repulsion lists its own inference as "cpu+zbl" (docs/repulsion.md): this
  // mlip adds the repulsion to it; an older one, which could not, runs the TorchScript forward.
  const models::PairRepulsionSettings repulsion = models::pair_repulsion_from(record);
  const std::string own = models::own_inference_capability(device.str(), repulsion);
  const bool own_here = std::find(caps.inference.begin(), caps.inference.end(), own) != caps.inference.end();
  if (wanted == Evaluation::kAuto && own_here) {
    const models::InferenceEntry* entry = models::find_inference(model_type);
    if (entry != nullptr && entry->inference)
      inference = models::with_pair_repulsion(entry->inference(record, module), repulsion, type_names);
  }
  long_range = models::long_range_from(record);
  if (long_range.enabled && (!inference || !inference->inputs().charges)) {
    // The forward's E_long is one frame's (it refuses `nlocal`): MD across ranks needs the
    // charge head's own inference with the term summed over the ranks.
    std::string why = wanted == Evaluation::kTorchScript ? "evaluation torchscript was asked for"
                      : device.is_cuda()                ? "the device is " + device.str()
                                                        : "the " + model_type + " model's own inference has no charges yet";
    throw Error(path + ": the model has a long-range term (model.long_range), which MD evaluates through the model's "
                "own inference on the CPU, with the term summed over the ranks; " + why +
                " (docs/lammps.md \"Long range across ranks\")");
  }
  if (!inference) {
    inference = std::make_unique<models::TorchScriptInference>(module, device, dtype, r_max);
    device_pairs = pairs == PairBuilding::kDevice || (pairs == PairBuilding::kAuto && device.is_cuda());
  }
}

void Potential::Impl::check_capabilities(const models::Capabilities& caps, archive::ExtraFiles& extra) const {
  auto mismatch = [&](const std::string& what, const std::string& stored, const std::string& capable) {
    throw Error(path + ": capabilities: " + what + " is \"" + capable + "\", but the model's metadata says \"" + stored +
                "\" (a damaged or hand-edited model; freeze it again)");
  };
  if (caps.model_type != model_type) mismatch("model_type", model_type, caps.model_type);
  if (caps.dtype != extra["model_dtype"]) mismatch("dtype", extra["model_dtype"], caps.dtype);
  if (caps.type_map != type_names) {
    std::string names;
    for (const auto& n : caps.type_map) names += (names.empty() ? "" : " ") + n;
    mismatch("type_map", extra["type_names"], names);
  }
  const std::string kind = device.is_cuda() ? "cuda" : device.str();
  if (std::find(caps.devices.begin(), caps.devices.end(), kind) == caps.devices.end()) {
    std::string list;
    for (const auto& d : caps.devices) list += (list.empty() ? "" : ", ") + d;
    throw Error(path + ": device " + device.str() + ": this model runs on " + list);
  }
}

template <typename Real>
void Potential::Impl::compute_own(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial, Results& out) {
  const auto t0 = Clock::now();
  std::vector<Real> pos(atoms.positions, atoms.positions + atoms.natoms * 3);
  const std::vector<int> types(atoms.types, atoms.types + atoms.natoms);
  const auto nl = builder<Real>().build(pos.data(), atoms.natoms, nullptr, {false, false, false},
                                        inference->cutoff(), atoms.nlocal);
  check_no_overlap<Real>(nl, atoms, nullptr);
  const auto t1 = Clock::now();
  timings.neighbor_list += std::chrono::duration<double>(t1 - t0).count();
  models::NeighborInput input;
  if constexpr (std::is_same_v<Real, float>) input.list_float = &nl;
  else input.list_double = &nl;
  input.types = types.data();
  input.natoms = atoms.natoms;
  input.nlocal = atoms.nlocal;
  models::Request request;
  request.neighbors = &input;
  request.outputs.atomic_energy = atomic_energy;
  request.outputs.atom_virial = atom_virial;
  std::optional<LongRangeTerm> term;
  if (long_range.enabled) {  // the owned atoms are the rows [0, nlocal), the list's centres
    term.emplace(long_range, atoms.positions, atoms.nlocal, atoms.cell, atoms.periodic, atoms.ranks, solver,
                 long_range_cache, atom_virial);
    request.charge_coupling = &*term;
  }
  models::InferenceResult e = inference->evaluate(request);
  timings.model_atoms += atoms.nlocal;
  out.counts = std::move(e.counts);
  out.energy = e.energy;
  out.forces = std::move(e.forces);
  out.virial = e.virial;
  if (atomic_energy) out.atomic_energy = std::move(e.atomic);
  if (atom_virial) out.atom_virial = std::move(e.atom_virial);
  if (term) {
    add_long_range(*term, atoms.nlocal, atomic_energy, atom_virial, out);
    timings.long_range += term->seconds();
  }
  timings.model += seconds_since(t1);
}

/// The model's exchange over the nodes of a rank graph through the MD code's over its rows
/// (docs/lammps.md "Features exchanged between ranks"): node v stands for row row_of_node[v];
/// the owned nodes are the rows [0, nlocal); a ghost imaging an atom already present is no node
/// of its own, so its row takes no part (its features are those of the node it is folded onto,
/// its gradient is already there).
class NodeExchange : public models::GhostExchange {
 public:
  NodeExchange(GhostExchange& rows, const std::vector<int64_t>& row_of_node, int64_t natoms, int64_t nlocal)
      : rows_(rows), row_of_node_(row_of_node), natoms_(natoms), nlocal_(nlocal) {}

  void forward(double* nodes, int64_t width) override {
    buffer_.assign(size_t(natoms_ * width), 0.0);
    std::copy(nodes, nodes + nlocal_ * width, buffer_.begin());
    rows_.forward(buffer_.data(), width);
    for (size_t v = size_t(nlocal_); v < row_of_node_.size(); ++v)
      std::copy(buffer_.begin() + row_of_node_[v] * width, buffer_.begin() + (row_of_node_[v] + 1) * width,
                nodes + int64_t(v) * width);
  }

  void reverse(double* nodes, int64_t width) override {
    buffer_.assign(size_t(natoms_ * width), 0.0);
    std::copy(nodes, nodes + nlocal_ * width, buffer_.begin());
    for (size_t v = size_t(nlocal_); v < row_of_node_.size(); ++v)
      for (int64_t c = 0; c < width; ++c) buffer_[size_t(row_of_node_[v] * width + c)] += nodes[int64_t(v) * width + c];
    rows_.reverse(buffer_.data(), width);
    std::copy(buffer_.begin(), buffer_.begin() + nlocal_ * width, nodes);
  }

 private:
  GhostExchange& rows_;
  const std::vector<int64_t>& row_of_node_;
  int64_t natoms_, nlocal_;
  std::vector<double> buffer_;  // [natoms, width], the MD code's rows
};

template <typename Real>
void Potential::Impl::compute_graph(const LocalAtoms& atoms, bool exchanged, bool atomic_energy, bool atom_virial,
                                    Results& out) {
  const auto t0 = Clock::now();
  const int64_t n = atoms.natoms;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = atoms.ids != nullptr ? atoms.ids[i] : i;
  // Exchanged: one hop, the owned atoms the only centres, their neighbours within r_max the
  // other nodes (folded by id: an image of an atom present is that atom).
  const RankGraph g = rank_graph<Real>(atoms, ids, exchanged ? 1 : layers, r_max, builder<Real>());
  timings.neighbor_list += seconds_since(t0);
  if (!exchanged) return evaluate_graph(g, atoms, nullptr, atomic_energy, atom_virial, out);
  NodeExchange exchange(*atoms.exchange, g.row_of_node, n, atoms.nlocal);
  evaluate_graph(g, atoms, &exchange, atomic_energy, atom_virial, out);
}

void Potential::Impl::evaluate_graph(const RankGraph& g, const LocalAtoms& atoms, GhostExchange* exchange,
                                     bool atomic_energy, bool atom_virial, Results& out) {
  const auto t0 = Clock::now();
  const int64_t n = atoms.natoms;
  const int64_t nodes = int64_t(g.row_of_node.size()), npairs = int64_t(g.centre.size());
  timings.model_atoms += nodes;
  std::vector<double> node_pos(size_t(nodes) * 3);
  std::vector<int64_t> node_type(static_cast<size_t>(nodes));
  for (int64_t v = 0; v < nodes; ++v) {
    const int64_t row = g.row_of_node[size_t(v)];
    node_type[size_t(v)] = atoms.types[row];
    for (int d = 0; d < 3; ++d) node_pos[size_t(v * 3 + d)] = atoms.positions[row * 3 + d];
  }
  // d_ij = r_j - r_i of each pair, in float64: the neighbour's image minus the centre.
  std::vector<double> vectors(size_t(npairs) * 3);
  for (int64_t p = 0; p < npairs; ++p)
    for (int d = 0; d < 3; ++d)
      vectors[size_t(p * 3 + d)] = node_pos[size_t(g.neighbour[size_t(p)] * 3 + d)] -
                                   node_pos[size_t(g.centre[size_t(p)] * 3 + d)] + g.shift[size_t(p * 3 + d)];
  const auto t1 = Clock::now();
  timings.neighbor_list += std::chrono::duration<double>(t1 - t0).count();

  models::AtomGraph graph;
  graph.nodes = nodes;
  graph.nlocal = atoms.nlocal;
  graph.types = node_type.data();
  graph.npairs = npairs;
  graph.centre = g.centre.data();
  graph.neighbour = g.neighbour.data();
  graph.vectors = vectors.data();
  // The shifts are displacements in Å: no cell (docs/lammps.md "The graph of a rank").
  graph.positions = node_pos.data();
  graph.shifts = g.shift.data();
  models::Request request;
  request.graph = &graph;
  request.exchange = exchange;
  request.outputs.atomic_energy = atomic_energy;
  request.outputs.pair_gradient = atom_virial;
  std::optional<LongRangeTerm> term;
  if (long_range.enabled) {
    // The owned atoms' positions are the owned nodes' (nodes [0, nlocal) are rows [0, nlocal)).
    term.emplace(long_range, atoms.positions, atoms.nlocal, atoms.cell, atoms.periodic, atoms.ranks, solver,
                 long_range_cache, atom_virial);
    request.charge_coupling = &*term;
  }
  models::InferenceResult r = inference->evaluate(request);
  out.counts = std::move(r.counts);
  out.energy = r.energy;
  out.virial = r.virial;
  // Each node's force goes to the row standing for it; MD returns a ghost's force to its owner.
  out.forces.assign(size_t(n) * 3, 0.0);
  for (int64_t v = 0; v < nodes; ++v)
    for (int d = 0; d < 3; ++d) out.forces[size_t(g.row_of_node[size_t(v)] * 3 + d)] += r.forces[size_t(v * 3 + d)];
  if (atomic_energy) out.atomic_energy = std::move(r.atomic);
  if (atom_virial) {
    // Each pair's virial -d ⊗ dE/dd, half to each of its two atoms.
    const double* gp = r.pair_gradient.data();
    out.atom_virial.assign(size_t(n) * 9, 0.0);
    for (int64_t p = 0; p < npairs; ++p) {
      const int64_t i = g.row_of_node[size_t(g.centre[size_t(p)])], j = g.row_of_node[size_t(g.neighbour[size_t(p)])];
      for (int a = 0; a < 3; ++a) {
        const double d = vectors[size_t(p * 3 + a)];
        for (int b = 0; b < 3; ++b) {
          const double w = -0.5 * d * gp[p * 3 + b];
          out.atom_virial[size_t(i * 9 + a * 3 + b)] += w;
          out.atom_virial[size_t(j * 9 + a * 3 + b)] += w;
        }
      }
    }
  }
  if (term) {
    add_long_range(*term, atoms.nlocal, atomic_energy, atom_virial, out);
    timings.long_range += term->seconds();
  }
  timings.model += seconds_since(t1);
}

void Potential::Impl::add_long_range(const LongRangeTerm& term, int64_t nlocal, bool atomic_energy, bool atom_virial,
                                     Results& out) const {
  out.energy += term.energy();
  for (int64_t i = 0; i < nlocal * 3; ++i) out.forces[size_t(i)] += term.forces()[size_t(i)];
  for (size_t c = 0; c < 9; ++c) out.virial[c] += term.virial()[c];
  if (atomic_energy)
    for (int64_t i = 0; i < nlocal; ++i) out.atomic_energy[size_t(i)] += term.atomic_energy()[size_t(i)];
  if (atom_virial)
    for (int64_t i = 0; i < nlocal * 9; ++i) out.atom_virial[size_t(i)] += term.atom_virial()[size_t(i)];
  out.charges = term.charges();
}

void Potential::Impl::compute_on_device(const LocalAtoms& atoms, bool atomic_energy, bool atom_virial,
                                        Results& out) {
  const auto t0 = Clock::now();
  const int64_t n = atoms.natoms;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor pos =
      torch::from_blob(const_cast<double*>(atoms.positions), {n, 3}, torch::kFloat64).to(device);
  const torch::Tensor ids =
      atoms.ids != nullptr ? torch::from_blob(const_cast<int64_t*>(atoms.ids), {n}, i64).to(device) : torch::Tensor();
  std::optional<DeviceOverlap> overlap;
  const DeviceGraph g = build_device_graph(pos, ids, atoms.nlocal, layers, r_max, overlap);
  if (overlap) throw_overlap(atoms, overlap->row_i, overlap->row_j, overlap->distance);
  const torch::Tensor types =
      torch::from_blob(const_cast<int*>(atoms.types), {n}, torch::kInt32).to(device).to(torch::kInt64);
  const torch::Tensor node_pos = pos.index_select(0, g.row_of_node);
  const auto t1 = Clock::now();
  timings.neighbor_list += std::chrono::duration<double>(t1 - t0).count();
  timings.model_atoms += g.nodes;

  // forward()'s input (docs/deploy.md "Interface"): the shifts are displacements in Å, no cell.
  c10::Dict<std::string, torch::Tensor> input;
  input.insert("pos", node_pos.to(dtype));
  input.insert("atom_types", types.index_select(0, g.row_of_node));
  input.insert("edge_index", torch::stack({g.centre, g.neighbour}));
  input.insert("cell", torch::eye(3, torch::TensorOptions().dtype(dtype).device(device)));
  input.insert("edge_cell_shift", g.shift.to(dtype));
  if (atoms.nlocal < g.nodes) input.insert("nlocal", torch::tensor(atoms.nlocal, i64));
  const auto result = module.forward({input}).toGenericDict();
  auto output = [&](const char* key, int64_t count) {
    torch::Tensor t = result.at(key).toTensor().to(torch::kFloat64).reshape({-1});
    if (t.numel() < count)
      throw Error(std::string("TorchScript forward: output '") + key + "' has " + std::to_string(t.numel()) +
                  " values, expected " + std::to_string(count));
    return t.slice(0, 0, count);
  };
  auto to_host = [](const torch::Tensor& t, std::vector<double>& v) {
    const torch::Tensor h = t.to(torch::kCPU).contiguous();
    v.assign(h.data_ptr<double>(), h.data_ptr<double>() + h.numel());
  };
  // Each node's force onto the row standing for it; MD returns a ghost's force to its owner.
  const torch::Tensor forces = torch::zeros({n, 3}, pos.options())
                                   .index_copy_(0, g.row_of_node, output("forces", g.nodes * 3).view({g.nodes, 3}));
  torch::Tensor scalars = torch::cat({output("total_energy", 1), output("virial", 9)});
  std::vector<double> head;
  to_host(scalars, head);
  out.energy = head[0];
  std::copy(head.begin() + 1, head.end(), out.virial.begin());
  to_host(forces, out.forces);
  if (atomic_energy) to_host(output("atomic_energy", atoms.nlocal), out.atomic_energy);
  if (atom_virial) {
    // Each pair's virial -d ⊗ dE/dd, half to each of its two atoms' rows.
    const torch::Tensor gradient = output("edge_gradient", g.npairs * 3).view({g.npairs, 3});
    const torch::Tensor d = node_pos.index_select(0, g.neighbour) - node_pos.index_select(0, g.centre) + g.shift;
    const torch::Tensor w = (-0.5 * d.unsqueeze(2) * gradient.unsqueeze(1)).reshape({g.npairs, 9});
    const torch::Tensor virial = torch::zeros({n, 9}, pos.options())
                                     .index_add_(0, g.row_of_node.index_select(0, g.centre), w)
                                     .index_add_(0, g.row_of_node.index_select(0, g.neighbour), w);
    to_host(virial, out.atom_virial);
  }
  timings.model += seconds_since(t1);
}

Potential::Potential(const std::string& path, const std::string& device, Evaluation evaluation, PairBuilding pairs)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(path, device, evaluation, pairs);
}

bool Potential::pairs_on_device() const { return impl_->device_pairs; }

Potential::~Potential() = default;

const std::vector<std::string>& Potential::type_names() const { return impl_->type_names; }
const std::string& Potential::model_type() const { return impl_->model_type; }
const std::string& Potential::dtype() const { return impl_->dtype_name; }
double Potential::cutoff() const { return impl_->r_max; }
int64_t Potential::message_layers() const { return impl_->layers; }
int64_t Potential::exchange_width() const {
  return impl_->layers > 1 ? impl_->inference->inputs().exchange_width : 0;
}
const Timings& Potential::timings() const { return impl_->timings; }
bool Potential::long_range() const { return impl_->long_range.enabled; }
void Potential::set_long_range_solver(LongRangeSolver solver) { impl_->solver = solver; }
LongRangeSolver Potential::long_range_solver() const { return impl_->solver; }
std::vector<models::Counter> Potential::counters() const { return impl_->inference->counters(); }
void Potential::reset_timings() { impl_->timings = Timings(); }

std::string Potential::describe() const {
  std::ostringstream o;
  o << impl_->model_type << " (" << impl_->dtype_name << ", r_max " << impl_->r_max << " Å";
  if (impl_->layers > 1) o << ", " << impl_->layers << " layers";
  o << ") on " << impl_->device.str() << ", " << impl_->inference->describe();
  if (impl_->inference->inputs().graph) o << (impl_->device_pairs ? ", pairs on the device" : ", pairs on the host");
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
  if (impl_->long_range.enabled && atoms.periodic && atoms.cell == nullptr)
    throw Error("MD atoms: the model has a long-range term and the box is periodic, but no cell was given");
  const bool f32 = impl_->dtype == torch::kFloat32;
  if (impl_->inference->inputs().neighbor_list) {
    if (f32) impl_->compute_own<float>(atoms, atomic_energy, atom_virial, out);
    else impl_->compute_own<double>(atoms, atomic_energy, atom_virial, out);
  } else {
    const bool exchanged = atoms.exchange != nullptr && exchange_width() > 0;
    if (impl_->device_pairs && !exchanged) impl_->compute_on_device(atoms, atomic_energy, atom_virial, out);
    else if (f32) impl_->compute_graph<float>(atoms, exchanged, atomic_energy, atom_virial, out);
    else impl_->compute_graph<double>(atoms, exchanged, atomic_energy, atom_virial, out);
  }
  check_finite(atoms, out);
  ++impl_->timings.calls;
}

}  // namespace mlip::md
