#pragma once

#include <torch/script.h>

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/system.h"
#include "models/long_range/long_range.h"
#include "models/pair_repulsion.h"

namespace mlip::models {

/// A model's part of the training input (the `model` section), read and checked by its
/// registry entry (models/registry.h). Each model derives its own settings from this.
/// model.e0s: where the per-type reference energies E0 (the energy of each type's isolated
/// atom, which the model's atomic energies start from) come from (docs/training.md "Reference
/// energies"; MACE's E0s).
struct ReferenceEnergies {
  enum class Kind {
    kFit,       ///< `fit` (default): the least-squares fit of the frames' energies to their composition
    kIsolated,  ///< `isolated`: the training data's frames with config_type=IsolatedAtom, or `file`'s
    kGiven,     ///< {element: eV, ...}: as written
  };
  Kind kind = Kind::kFit;
  std::map<std::string, double> given;  ///< kGiven: eV per type name
  /// kIsolated from `{isolated: FILE}`: a file (or directory) of one-atom frames, read with the
  /// training data's keys, in addition to the training data's IsolatedAtom frames; else empty.
  std::string file;
};

/// The smallest cutoff a model accepts, Å: the shortest bond (H2) is 0.74 Å long, so a model
/// with a smaller one would see no neighbour; smaller values (1e-5, 1e-300) are typos that
/// otherwise end in NaN or in a neighbour-list grid of more cells than there are numbers.
constexpr double kMinCutoff = 0.5;

struct ModelSettings {
  virtual ~ModelSettings() = default;
  /// The registry name of the model ("se_e2_a", "equivariant", ...).
  std::string type;
  /// model.type_map: the type names; a type's id is its index here.
  std::vector<std::string> type_map;
  /// "float64" or "float32": the dtype of every parameter and of the per-frame inputs.
  std::string precision = "float64";
  /// model.data_stat_nbatch: the statistics (energy bias, normalisations) use the first this
  /// many batches of every training system.
  int64_t statistics_batches = 10;
  /// model.e0s.
  ReferenceEnergies e0s;
  /// model.pair_repulsion (docs/repulsion.md): every model type adds it to its energy.
  PairRepulsionSettings pair_repulsion;
  /// model.long_range (docs/long_range.md): learned charges and their electrostatic energy.
  LongRangeSettings long_range;

  /// The interaction range, Å: pairs farther apart never interact (the frozen model's r_max).
  virtual double cutoff() const = 0;
  /// Interaction layers (message passing): an atom's energy depends on atoms up to this many
  /// cutoffs away (1 for a local model such as se_e2_a; docs/lammps.md "Several ranks").
  virtual int64_t message_layers() const { return 1; }
  torch::Dtype dtype() const { return precision == "float32" ? torch::kFloat32 : torch::kFloat64; }
};

/// What a model derives from one frame's geometry and caches (training frames do not move):
/// se_e2_a's packed environment rows, the equivariant model's pair vectors. Opaque to the
/// trainer; it lives on the model's device.
struct FrameInput {
  virtual ~FrameInput() = default;
  /// Memory it holds (host and device), bytes: what the trainer's cache of made frames counts
  /// against its budget (docs/data.md "The cache").
  virtual int64_t bytes() const = 0;
};

/// Bytes of a tensor's elements (0 when undefined).
inline int64_t tensor_bytes(const torch::Tensor& t) { return t.defined() ? int64_t(t.nbytes()) : 0; }

/// The atoms of one system (every frame of a system has the same atoms).
struct SystemAtoms {
  int64_t natoms = 0;
  /// [N] type id of each atom.
  std::vector<int> types;
  /// [N] int64 type ids on the model's device.
  torch::Tensor atype;
};

/// A model's prediction for a batch of B frames of one system.
struct Prediction {
  torch::Tensor energy;  ///< [B] float64, eV
  torch::Tensor forces;  ///< [B, N, 3] model dtype, eV/Å
  torch::Tensor virial;  ///< [B, 3, 3] model dtype, eV
  /// [B, N] float64, e: each atom's charge (model.long_range: the charges its E_long is of,
  /// docs/long_range.md "Charge labels"); undefined for a model without charges.
  torch::Tensor charges;
};

/// Frames for the statistics: a sample of the frames of `system` (read by the trainer; the
/// first data_stat_nbatch batches, docs/training.md "Statistics").
struct StatisticsFrames {
  const data::System* system = nullptr;
  std::vector<data::Frame> frames;
};

/// What a model is built with besides its settings.
struct ModelContext {
  /// Where its parameters and per-frame inputs live (cpu or cuda:K).
  torch::Device device = torch::kCPU;
  /// training.seed: the default of the model's own seeds when they are not given.
  std::optional<uint64_t> training_seed;
  /// Added to every seed the model draws its weights from (its own seeds, or training_seed, or
  /// the default 1): member k of a committee (`mlip train --committee N`) gets k, so that the
  /// members differ in their initial weights and member 0 equals a plain run.
  uint64_t seed_offset = 0;
  /// The training systems, for settings derived from the data (se_e2_a's sel: auto reads a
  /// sample of their frames, data::neighbor_stat_sample).
  const std::vector<data::System>* training_systems = nullptr;
  /// Where to print what the model derives (nullptr: nowhere).
  std::ostream* log = nullptr;
  /// Pad every training batch to bucket sizes (models/bucket.h), so that batches of one system
  /// share their tensor shapes: what a captured CUDA graph replays (docs/device.md "Static
  /// shapes"). The padding changes no prediction or gradient. se_e2_a's inputs have fixed shapes
  /// on its device-generic path (sel-padded matrices), which it then takes.
  bool static_shapes = false;
};

/// A trainable model: one implementation per model type, made by the registry. The trainer,
/// the tester and freeze know only this interface (docs/models.md).
///
/// A training step: predict() on a batch, the loss on the prediction, then backward() with
/// the loss's gradient with respect to the prediction, which adds d loss / d parameter to the
/// parameters' .grad() (a hand-written adjoint or autograd, as the model chooses).
class Model {
 public:
  virtual ~Model() = default;

  /// The TorchScript module: its parameters are what the optimiser steps; its buffers and
  /// attributes hold the statistics. Checkpoints and frozen models save it as it is.
  virtual torch::jit::Module& module() = 0;
  /// The settings it was built from.
  virtual const ModelSettings& settings() const = 0;
  /// One line for the training summary: "se_e2_a, float64, sel [46, 92]".
  virtual std::string summary() const = 0;
  /// Where the parameters and per-frame inputs live.
  virtual torch::Device device() const = 0;

  /// The input of one frame of `system` (its geometry in `frame`), on the model's device. Called
  /// from the trainer's worker threads while the main thread trains: implementations must be
  /// safe to call concurrently with each other and with predict() (a model serialises what it
  /// shares, such as a neighbour-list builder). The result must be a pure function of the frame
  /// and the settings (docs/data.md "Determinism").
  virtual std::unique_ptr<FrameInput> prepare_frame(const data::System& system, const data::Frame& frame) = 0;
  /// A warning about the frames prepared so far (e.g. neighbours beyond sel), or "".
  virtual std::string preparation_warning() const { return ""; }

  /// Sets the statistics (energy bias, normalisations) from these frames, printing what it
  /// found to `log`. reference_energies: [ntypes] eV, the E0s the per-type energy bias takes
  /// instead of the fit (model.e0s isolated or given); empty: fit.
  virtual void compute_statistics(const std::vector<StatisticsFrames>& frames,
                                  const std::vector<double>& reference_energies, std::ostream& log) = 0;

  /// Energies, forces and virials of `frames` (inputs of frames of the system `atoms`). With
  /// `training`, keeps what backward() needs.
  virtual Prediction predict(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames,
                             bool training) = 0;
  /// After predict(..., true): adds d loss / d parameter to every parameter's .grad(), given
  /// d loss / d energy [B] (float64), d loss / d forces [B, N, 3], d loss / d virial [B, 3, 3]
  /// and d loss / d charges [B, N] (float64; only for a prediction with charges) (undefined:
  /// zero).
  virtual void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                        const torch::Tensor& grad_virial, const torch::Tensor& grad_charges) = 0;

  /// With ModelContext::static_shapes, the sizes that fix every tensor shape of a training step
  /// on this batch (for the equivariant model: frames, atoms, padded edges, padded pairs):
  /// batches with equal keys run with equal shapes, so one captured graph serves them all.
  /// Empty: no such sizes are known (without static_shapes, or a model that does not say).
  virtual std::vector<int64_t> shape_key(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) const {
    return {};
  }
  /// With static shapes (a non-empty shape_key), the batch's inputs as tensors on the model's
  /// device, of the shapes the key fixes: what a step replayed as a CUDA graph reads from its
  /// static buffers (docs/device.md "Static shapes"). Without: mlip::Error.
  virtual std::vector<torch::Tensor> pack(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames);
  /// predict() of the batch that pack() gave these tensors for (or copies of them, in buffers of
  /// the same shapes): it makes no tensor from host data and reads nothing back to the host, so
  /// that it can be captured. predict() on the frames gives the same numbers.
  virtual Prediction predict_packed(const SystemAtoms& atoms, const std::vector<torch::Tensor>& packed, bool training);
};

/// Model::backward for models whose prediction carries an autograd graph: runs autograd's
/// backward from `outputs` (energy, forces, virial, charges) with the given gradients, skipping pairs
/// where either is undefined or the output has no graph; gradients are cast to the outputs'
/// dtypes. The .grad() of `inputs` (empty: of every leaf of the graph) accumulate; naming the
/// parameters skips the gradients of leaves that are not (per-frame inputs).
void backward_through_graph(const Prediction& outputs, const torch::Tensor& grad_energy,
                            const torch::Tensor& grad_forces, const torch::Tensor& grad_virial,
                            const torch::Tensor& grad_charges, const std::vector<torch::Tensor>& inputs = {});

}  // namespace mlip::models
