#include "models/se_e2_a/se_e2_a_model.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <cstdlib>
#include <ostream>
#include <atomic>
#include <mutex>
#include <sstream>
#include <regex>

#include "data/kokkos_runtime.h"
#include "models/finite_cast.h"
#include "models/module_device.h"
#include "models/se_e2_a/compress.h"
#include "models/se_e2_a/se_e2_a_inference.h"
#include "data/neighbor_list.h"
#include "data/neighbor_stat.h"
#include "error.h"
#include "models/energy_bias.h"
#include "models/se_e2_a/env_matrix.h"
#include "models/se_e2_a/se_e2_a_generic_path.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"

namespace mlip::models {

using input::Bound;
using input::Section;

namespace {

// ---------------------------------------------------------------------------------------------
// Input: model.descriptor and model.fitting_net

/// descriptor.sel: a list of non-negative integers, "auto" or "auto:ratio".
SelSpec to_sel(const YAML::Node& node, const std::string& path) {
  const std::string what = "a list of non-negative integers, or \"auto[:ratio]\"";
  SelSpec sel;
  if (node.IsSequence()) {
    sel.values = input::to_list<int64_t>(node, path, what, [](const YAML::Node& n, const std::string& p) {
      return input::to_integer(n, p, Bound::kNonNegative);
    });
    return sel;
  }
  const std::string s = node.IsScalar() ? node.Scalar() : "";
  double ratio = 0;
  if (s == "auto") {
    sel.automatic = true;
  } else if (s.rfind("auto:", 0) == 0 && input::parse_number(s.substr(5), ratio) && ratio > 0) {
    sel.automatic = true;
    sel.ratio = ratio;
  } else {
    input::expected(path, what, node);
  }
  return sel;
}

void read_descriptor(const Section& d, SeASettings& s) {
  SeAConfig& c = s.config;
  d.require({"sel", "rcut"});
  d.choice("type", "se_e2_a", {"se_e2_a"}, {{"se_a", "se_e2_a"}});
  s.sel = to_sel(d.get("sel"), d.path_of("sel"));
  if (!s.sel.automatic && s.sel.values.size() != s.type_map.size()) {
    input::fail(d.path_of("sel"), std::to_string(s.sel.values.size()) + " entries for " +
                                      std::to_string(s.type_map.size()) + " types in model.type_map");
  }
  c.rcut = d.number("rcut", c.rcut, Bound::kPositive);
  if (c.rcut < kMinCutoff)
    input::expected(d.path_of("rcut"), "a cutoff of at least 0.5 Å (the shortest bond, H2, is 0.74 Å)",
                    d.get("rcut"));
  c.rcut_smth = d.number("rcut_smth", c.rcut_smth, Bound::kNonNegative);
  if (c.rcut_smth >= c.rcut) {
    input::expected(d.path_of("rcut_smth"), "a number below rcut (" + input::describe(d.get("rcut")) + ")",
                    d.get("rcut_smth"));
  }
  c.neuron = d.integers("neuron", c.neuron);
  c.axis_neuron = d.integer("axis_neuron", c.axis_neuron);
  if (c.axis_neuron > c.neuron.back()) {
    input::fail(d.path_of("axis_neuron"), "expected at most the last neuron (" + std::to_string(c.neuron.back()) +
                                              "), got " + std::to_string(c.axis_neuron));
  }
  c.type_one_side = d.flag("type_one_side", c.type_one_side);
  c.resnet_dt = d.flag("resnet_dt", c.resnet_dt);
  s.precision = d.choice("precision", s.precision, {"float64", "float32"}, {{"default", "float64"}});
  s.descriptor_seed = d.seed("seed", s.descriptor_seed);
  d.choice("activation_function", "tanh", {"tanh"});
  d.only_default("trainable", "true", input::is_true);
  d.only_default("exclude_types", "an empty list", input::is_empty_list);
  d.only_default("set_davg_zero", "false", input::is_false);
  d.only_default("env_protection", "0", input::is_zero);
}

void read_fitting_net(const Section& f, SeASettings& s) {
  SeAConfig& c = s.config;
  f.choice("type", "ener", {"ener"});
  c.fitting_neuron = f.integers("neuron", c.fitting_neuron);
  c.fitting_resnet_dt = f.flag("resnet_dt", c.fitting_resnet_dt);
  s.fitting_precision = f.choice("precision", s.fitting_precision, {"float64", "float32"}, {{"default", "float64"}});
  s.fitting_seed = f.seed("seed", s.fitting_seed);
  f.choice("activation_function", "tanh", {"tanh"});
  f.only_default("trainable", "true", input::is_true);
  if (f.has_value("rcond")) f.number("rcond", 0.0);  // accepted for DeePMD inputs; not used
}

std::shared_ptr<ModelSettings> read_se_e2_a(const Section& m, const std::vector<std::string>& type_map) {
  auto s = std::make_shared<SeASettings>();
  s->type = "se_e2_a";
  s->type_map = type_map;
  s->config.type_map = type_map;
  m.require({"descriptor", "fitting_net"});
  for (const char* key : {"descriptor", "fitting_net"})
    if (!m.get(key).IsMap()) input::expected(m.path_of(key), "a mapping", m.get(key));
  read_descriptor(m.section("descriptor", {"type", "sel", "rcut", "rcut_smth", "neuron", "axis_neuron",
                                           "type_one_side", "resnet_dt", "precision", "seed",
                                           "activation_function", "trainable", "exclude_types", "set_davg_zero",
                                           "env_protection"}),
                  *s);
  read_fitting_net(m.section("fitting_net", {"type", "neuron", "resnet_dt", "precision", "seed",
                                             "activation_function", "trainable", "rcond"}),
                   *s);
  if (s->fitting_precision != s->precision)
    input::fail(m.path_of("fitting_net.precision"), "expected the descriptor's precision (\"" + s->precision +
                                                        "\"; one model has one precision), got \"" +
                                                        s->fitting_precision + "\"");
  s->config.precision = s->precision;
  m.number("data_stat_protect", 1e-2, Bound::kPositive);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The model

struct SeAFrame : FrameInput {
  PackedEnv packed;  // the real pairs of the frame, on the model's device
  LongRangeFrame long_range;  // with model.long_range only: positions and cell
  int64_t bytes() const override {
    return packed.bytes() + (long_range.pos.defined() ? int64_t(long_range.pos.nbytes() + long_range.cell.nbytes()) : 0);
  }
};

class SeAModel final : public Model {
 public:
  SeAModel(const SeASettings& settings, const ModelContext& context)
      : settings_(settings), device_(context.device), static_shapes_(context.static_shapes) {
    SeAConfig& c = settings_.config;
    const uint64_t fallback = context.training_seed.value_or(1);
    c.seed = settings_.descriptor_seed.value_or(fallback) + context.seed_offset;
    c.fitting_seed = settings_.fitting_seed.value_or(fallback) + context.seed_offset;
    c.sel = settings_.sel.automatic ? automatic_sel(context) : settings_.sel.values;
    // With reference energies of isolated atoms (or given), such an atom's energy is its bias.
    c.isolated_energy_is_bias = settings_.e0s.kind != ReferenceEnergies::Kind::kFit;
    c.pair_repulsion = settings_.pair_repulsion;
    c.long_range = settings_.long_range;
    if (c.long_range.enabled && static_shapes_)
      throw Error("model.long_range: the long-range term has batches of their own shapes (a k-vector set per cell), "
                  "which a captured CUDA graph cannot replay: set training.cuda_graphs: false (or leave it out)");
    module_ = build_se_e2_a(c);
    move_module(module_, device_);
    // Static shapes need the dense matrices of the device-generic path (docs/device.md "Static
    // shapes"); the hand-written path works on the real pairs only. The long-range term's second
    // derivatives (a force loss through the charges) are autograd's: the generic path
    // (docs/long_range.md "Training").
    kind_ = se_e2_a_path_kind(device_);
    if ((static_shapes_ && kind_ == SeAPathKind::kHandWritten) || c.long_range.enabled) kind_ = SeAPathKind::kGeneric;
    if (kind_ == SeAPathKind::kHandWritten) {
      if (!device_.is_cpu())
        throw Error("MLIP_SE_E2_A_PATH=hand-written: the hand-written path runs on the CPU only, the model is on " +
                    device_.str());
      hand_written_ = std::make_unique<SeAEvaluator>(c, module_);
    } else {
      generic_ = std::make_unique<SeAGenericPath>(c, module_, kind_ == SeAPathKind::kFused);
    }
  }

  torch::jit::Module& module() override { return module_; }
  const ModelSettings& settings() const override { return settings_; }
  torch::Device device() const override { return device_; }

  std::string summary() const override {
    std::ostringstream o;
    o << "se_e2_a, " << settings_.precision << ", sel [";
    for (size_t t = 0; t < settings_.config.sel.size(); ++t) o << (t ? ", " : "") << settings_.config.sel[t];
    const char* path = kind_ == SeAPathKind::kGeneric ? "device-generic"
                       : kind_ == SeAPathKind::kFused ? "device-generic with fused kernels"
                                                      : "hand-written";
    o << "], " << path << " training path";
    if (settings_.long_range.enabled)
      o << ", long-range charges (sigma " << settings_.long_range.sigma << " Å, kspace_spacing "
        << settings_.long_range.kspace_spacing << " Å)";
    return o.str();
  }

  std::unique_ptr<FrameInput> prepare_frame(const data::System& system, const data::Frame& frame) override {
    auto out = std::make_unique<SeAFrame>();
    const EnvMatrix env = settings_.dtype() == torch::kFloat32 ? environment<float>(system, frame)
                                                              : environment<double>(system, frame);
    truncated_ += env.truncated_blocks;
    out->packed = PackedEnv::pack(env, system.types, settings_.config, kind_ != SeAPathKind::kHandWritten);
    if (!device_.is_cpu()) out->packed = out->packed.to(device_);
    if (settings_.long_range.enabled) out->long_range = long_range_frame(system, frame, device_);
    return out;
  }

  std::string preparation_warning() const override {
    if (truncated_ == 0) return "";
    return std::to_string(truncated_) +
           " (atom, neighbour type) blocks had more neighbours than sel; the farthest were dropped (raise "
           "model.descriptor.sel, or use sel: auto)";
  }

  void compute_statistics(const std::vector<StatisticsFrames>& frames, const std::vector<double>& reference_energies,
                          std::ostream& log) override {
    // davg/dstd from the full environment matrices (empty slots included; docs/se_e2_a.md
    // "Statistics"), made again for these frames, and the energy bias.
    const int ntypes = int(settings_.type_map.size());
    EnvStat stat(ntypes, settings_.config.nslots());
    for (const StatisticsFrames& s : frames)
      for (const data::Frame& f : s.frames)
        stat.add(settings_.dtype() == torch::kFloat32 ? environment<float>(*s.system, f)
                                                      : environment<double>(*s.system, f),
                 s.system->types);
    const auto dtype = settings_.dtype();
    // Each number checked in the model's dtype before it becomes a buffer (models/finite_cast.h).
    module_.setattr("davg", finite_cast(stat.davg(), dtype, "the environment matrix's mean (davg)").to(device_));
    module_.setattr("dstd", finite_cast(stat.dstd(), dtype, "the environment matrix's deviation (dstd)").to(device_));
    const torch::Tensor bias = energy_bias(frames, reference_energies, ntypes, "energy bias", log);
    module_.setattr("bias", finite_cast(bias, dtype, "the energy bias (eV per atom)", settings_.type_map).to(device_));
  }

  Prediction predict(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames, bool training) override {
    const PackedEnv& batch = batch_of(frames);
    if (settings_.long_range.enabled) {
      std::vector<torch::Tensor> pos, cell;
      std::vector<bool> periodic;
      for (const FrameInput* f : frames) {
        const LongRangeFrame& l = static_cast<const SeAFrame*>(f)->long_range;
        pos.push_back(l.pos), cell.push_back(l.cell), periodic.push_back(l.periodic);
      }
      const SeAEvaluator::Output out =
          generic_->forward_long_range(batch, atoms.types, torch::stack(pos), torch::stack(cell), periodic,
                                       settings_.long_range, training);
      return {out.energy, out.forces, out.virial, out.charges};
    }
    const SeAEvaluator::Output out =
        generic_ ? generic_->forward(batch, atoms.types, training) : hand_written_->forward(batch, atoms.types);
    return {out.energy, out.forces, out.virial, {}};
  }

  std::vector<int64_t> shape_key(const SystemAtoms& atoms,
                                 const std::vector<const FrameInput*>& frames) const override {
    if (!static_shapes_) return {};
    // The packed batch holds each type's atoms (SeAGenericPath::dense_with_types): systems of as
    // many atoms in other proportions of the types have shapes of their own.
    std::vector<int64_t> key{int64_t(frames.size()), atoms.natoms};
    key.resize(key.size() + settings_.config.type_map.size(), 0);
    for (int t : atoms.types) ++key.at(2 + size_t(t));
    return key;
  }

  std::vector<torch::Tensor> pack(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) override {
    if (!static_shapes_) return Model::pack(atoms, frames);
    return generic_->dense_with_types(batch_of(frames), atoms.types);
  }

  Prediction predict_packed(const SystemAtoms& atoms, const std::vector<torch::Tensor>& packed,
                            bool training) override {
    if (!static_shapes_) return Model::predict_packed(atoms, packed, training);
    const SeAEvaluator::Output out = generic_->forward_dense(packed, training);
    return {out.energy, out.forces, out.virial, {}};
  }

  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces, const torch::Tensor& grad_virial,
                const torch::Tensor& grad_charges) override {
    // Charges come from the generic path only (model.long_range trains there).
    if (generic_) generic_->backward(grad_energy, grad_forces, grad_virial, grad_charges);
    else hand_written_->backward(grad_energy, grad_forces, grad_virial);
  }

 private:
  /// The frames' real pairs as one batch (kept in batch_ when there are several).
  const PackedEnv& batch_of(const std::vector<const FrameInput*>& frames) {
    if (frames.size() == 1) return static_cast<const SeAFrame*>(frames[0])->packed;
    std::vector<const PackedEnv*> parts;
    for (const FrameInput* f : frames) parts.push_back(&static_cast<const SeAFrame*>(f)->packed);
    batch_ = PackedEnv::concat(parts, generic_ != nullptr);
    return batch_;
  }

  /// The environment matrix of one frame (host), in the model's Real type.
  template <typename Real>
  EnvMatrix environment(const data::System& system, const data::Frame& frame) {
    const SeAConfig& c = settings_.config;
    std::vector<Real> pos(frame.coord.begin(), frame.coord.end());
    // One build at a time: the builders' buffers and Kokkos are shared (prepare_frame runs on
    // worker threads; data/kokkos_runtime.h).
    std::lock_guard<std::mutex> lock(data::kokkos_mutex());
    auto& builder = builder_of<Real>();
    auto nl = builder.build(pos.data(), system.natoms(), frame.cell(), system.pbc, c.rcut);
    return compute_env_matrix<Real>(nl, system.types, EnvMatrixParams{c.rcut, c.rcut_smth, c.sel});
  }
  template <typename Real>
  data::NeighborListBuilder<Real>& builder_of() {
    if constexpr (std::is_same_v<Real, float>) return builder_float_;
    else return builder_double_;
  }

  std::vector<int64_t> automatic_sel(const ModelContext& context) const {
    if (context.training_systems == nullptr) throw Error("model.descriptor.sel: \"auto\" needs the training data");
    const SeAConfig& c = settings_.config;
    auto stat = data::neighbor_stat(*context.training_systems, int(c.type_map.size()), c.rcut,
                                    data::kNeighborStatSampleFrames);
    std::vector<int64_t> sel;
    for (auto m : stat.max_neighbors) sel.push_back(4 * int64_t(std::ceil(double(m) * settings_.sel.ratio / 4.0)));
    if (context.log != nullptr) {
      *context.log << "sel: auto:" << settings_.sel.ratio << " -> [";
      for (size_t t = 0; t < sel.size(); ++t) *context.log << (t ? ", " : "") << sel[t];
      *context.log << "] (from " << stat.frames << " frames; min neighbour distance " << stat.min_distance << " Å)\n";
    }
    return sel;
  }

  SeASettings settings_;
  torch::Device device_;
  bool static_shapes_;  // ModelContext::static_shapes: the device-generic path, pack() and predict_packed()
  torch::jit::Module module_;
  SeAPathKind kind_ = SeAPathKind::kHandWritten;
  std::unique_ptr<SeAEvaluator> hand_written_;
  std::unique_ptr<SeAGenericPath> generic_;
  PackedEnv batch_;  // the current batch when it has several frames (the paths keep references into it)
  std::atomic<int64_t> truncated_{0};
  data::NeighborListBuilder<float> builder_float_;
  data::NeighborListBuilder<double> builder_double_;
};

}  // namespace

SeAPathKind se_e2_a_path_kind(torch::Device device) {
  const char* env = std::getenv("MLIP_SE_E2_A_PATH");
  const std::string choice = env != nullptr ? env : "";
  if (choice == "generic") return SeAPathKind::kGeneric;
  if (choice == "hand-written") return SeAPathKind::kHandWritten;
  if (choice == "fused") return SeAPathKind::kFused;
  if (!choice.empty())
    throw Error("MLIP_SE_E2_A_PATH: expected \"generic\", \"fused\" or \"hand-written\" (or unset), got \"" + choice +
                "\"");
  return device.is_cpu() ? SeAPathKind::kHandWritten : SeAPathKind::kGeneric;
}

namespace {

/// The weights of a net of these widths (matrices and biases; resnet_dt's timesteps left out).
double net_weights(const std::vector<int64_t>& widths) {
  double n = 0.0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) n += double(widths[l]) * double(widths[l + 1]) + double(widths[l + 1]);
  return n;
}

/// What a training batch of se_e2_a holds, at least (docs/training.md "Memory checked before the
/// first allocation"): the weights with their gradients and Adam's two moments; the neighbour
/// list and the dense environment matrix of one frame; the batch's real pairs with their
/// embedding outputs; per atom, the descriptor and the fitting net's layers.
MemoryEstimate se_e2_a_memory(const ModelSettings& settings, const BatchSizes& batch) {
  const auto& se = dynamic_cast<const SeASettings&>(settings);
  const SeAConfig& c = se.config;
  const double value = se.precision == "float32" ? 4.0 : 8.0;
  const double ntypes = double(se.type_map.size());
  const double m = double(c.neuron.back()), axis = double(c.axis_neuron);
  std::vector<int64_t> embedding = {1}, fitting = {c.neuron.back() * c.axis_neuron};
  embedding.insert(embedding.end(), c.neuron.begin(), c.neuron.end());
  fitting.insert(fitting.end(), c.fitting_neuron.begin(), c.fitting_neuron.end());
  fitting.push_back(1);
  const double embedding_weights = (c.type_one_side ? ntypes : ntypes * ntypes) * net_weights(embedding);
  const double fitting_weights = ntypes * net_weights(fitting);
  double slots = 0.0;
  std::string sel_text;
  if (se.sel.automatic) {
    slots = std::max(1.0, std::ceil(batch.pairs / double(std::max<int64_t>(batch.atoms, 1))));
    std::ostringstream text;
    text << "model.descriptor.sel auto (about " << slots << " neighbours per atom)";
    sel_text = text.str();
  } else {
    for (int64_t v : se.sel.values) slots += double(v);
    sel_text = "model.descriptor.sel " + list_text(se.sel.values);
  }
  double fitting_sum = 0.0;
  for (int64_t w : c.fitting_neuron) fitting_sum += double(w);
  const double atoms = double(batch.frames) * double(batch.atoms);
  std::ostringstream radius;
  radius << "model.descriptor.rcut " << c.rcut << " Å (about " << std::setprecision(2) << batch.pairs
         << " pairs in a frame of " << batch.atoms << " atoms)";
  const std::string fitting_text = "model.fitting_net.neuron " + list_text(c.fitting_neuron) +
                                   " (its input: descriptor.neuron[-1] " + std::to_string(c.neuron.back()) +
                                   " x axis_neuron " + std::to_string(c.axis_neuron) + ")";
  MemoryEstimate e;
  e.parts.push_back({"the embedding nets' weights, their gradients and Adam's two moments",
                     "model.descriptor.neuron " + list_text(c.neuron), 4.0 * embedding_weights * value});
  e.parts.push_back({"the fitting nets' weights, their gradients and Adam's two moments", fitting_text,
                     4.0 * fitting_weights * value});
  e.parts.push_back({"the neighbour list of one frame", radius.str(), batch.pairs * data::kNeighborPairBytes});
  // A frame is prepared through its dense environment matrix, [atoms, slots] rows R, their
  // derivatives, the pair vectors and the neighbour indices (19 numbers and an int64 per slot);
  // the batch keeps the real pairs of its frames (the same numbers and two int64 per pair) and
  // their embedding outputs.
  const double real_pairs = double(batch.frames) * std::min(batch.pairs, double(batch.atoms) * slots);
  e.parts.push_back({"the dense environment matrix of one frame while it is prepared", sel_text,
                     double(batch.atoms) * slots * (19.0 * value + 8.0)});
  e.parts.push_back({"the environment rows and embedding outputs of the batch's pairs",
                     radius.str() + ", neuron " + list_text(c.neuron),
                     real_pairs * ((19.0 + m) * value + 16.0)});
  e.parts.push_back({"the descriptors and fitting-net layers of the batch's atoms", fitting_text,
                     atoms * (m * axis + m * 4.0 + fitting_sum) * value});
  // A made frame keeps its real pairs' rows (PackedEnv: 19 numbers and two int64 each).
  e.frame_bytes = std::min(batch.pairs, double(batch.atoms) * slots) * (19.0 * value + 16.0);
  if (batch.frames_ahead > 0)
    e.parts.push_back({"the environment rows of the " + std::to_string(batch.frames_ahead) + " frame(s) made ahead",
                       sel_text, double(batch.frames_ahead) * e.frame_bytes});
  return e;
}

/// Fine-tuning roles of the module's attributes (docs/training.md "Fine-tuning"): every net is
/// an element's (emb_<t>, emb_<i>_<t>, fit_<t>: the ids in the name); davg, dstd and the energy
/// bias have a row per type; sel must agree for the elements both models know; the offsets and
/// a compressed model's tables are made from the settings.
AttributeRole se_e2_a_attribute_role(const ModelSettings&, const std::string& name) {
  static const std::regex per_element(R"(^(emb|fit)_(\d+)(?:_(\d+))?_([a-z]+\d*)$)");
  AttributeRole role;
  std::smatch m;
  if (std::regex_match(name, m, per_element)) {
    role.kind = AttributeRole::Kind::kTypeNamed;
    role.types.push_back(std::stoll(m[2]));
    if (m[3].matched) role.types.push_back(std::stoll(m[3]));
    const std::string net = m[1], layer = m[4];
    role.renamed = [net, layer](const std::vector<int64_t>& ids) {
      std::string out = net;
      for (int64_t id : ids) out += "_" + std::to_string(id);
      return out + "_" + layer;
    };
    // model.long_range's charge outputs: taken when the pretrained model has them, else as built.
    role.optional = layer == "wq" || layer == "bq";
  } else if (name == "davg" || name == "dstd" || name == "bias") {
    role.kind = AttributeRole::Kind::kTypeRows;
  } else if (name == "sel") {
    role.kind = AttributeRole::Kind::kTypeRowsChecked;
    role.setting = "model.descriptor.sel";
  } else {
    role.kind = AttributeRole::Kind::kDerived;  // sel_offset, compressed tables
  }
  return role;
}

}  // namespace

ModelEntry se_e2_a_entry() {
  ModelEntry e;
  e.name = "se_e2_a";
  e.descriptor = true;
  e.long_range = true;
  e.aliases = {"se_a"};
  e.keys = {"type", "type_map", "descriptor", "fitting_net", "data_stat_nbatch", "data_stat_protect"};
  e.read = read_se_e2_a;
  e.create = [](const ModelSettings& settings, const ModelContext& context) -> std::unique_ptr<Model> {
    return std::make_unique<SeAModel>(dynamic_cast<const SeASettings&>(settings), context);
  };
  // The record's keys from the settings, with what the module decided (sel from the data).
  e.record = [](const ModelSettings& settings, const torch::jit::Module& module) {
    const auto& se = dynamic_cast<const SeASettings&>(settings);
    SeAConfig config = se.config;
    config.type_map = se.type_map;
    config.precision = se.precision;
    return se_e2_a_record(config);
  };
  e.memory = se_e2_a_memory;
  e.attribute_role = se_e2_a_attribute_role;
  return e;
}

}  // namespace mlip::models
