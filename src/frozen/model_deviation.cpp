#include "frozen/model_deviation.h"

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "data/extxyz_writer.h"
#include "data/load.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "frozen/frame_graph.h"
#include "models/committee_deviation.h"
#include "models/torchscript_inference.h"

namespace mlip::frozen {

namespace {

/// One committee member: its module run through the TorchScript forward, its cutoff.
struct Member {
  std::string path;
  std::vector<std::string> type_map;
  double cutoff = 0;
  std::unique_ptr<models::TorchScriptInference> inference;
};

Member load_member(const std::string& model) {
  Member m;
  m.path = archive::resolve_checkpoint(model);
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(m.path, extra);
  module.eval();
  m.type_map = archive::stored_type_names(extra);
  m.cutoff = std::stod(extra["r_max"]);
  const auto dtype = extra["model_dtype"] == "float32" ? torch::kFloat32 : torch::kFloat64;
  m.inference = std::make_unique<models::TorchScriptInference>(module, torch::kCPU, dtype, m.cutoff);
  return m;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

/// The committee's mean prediction of a frame: energy (eV), forces [N * 3] (eV/Å), virial (eV).
models::InferenceResult mean_prediction(const std::vector<models::InferenceResult>& predictions) {
  models::InferenceResult mean = predictions[0];
  for (size_t k = 1; k < predictions.size(); ++k) {
    mean.energy += predictions[k].energy;
    for (size_t i = 0; i < mean.forces.size(); ++i) mean.forces[i] += predictions[k].forces[i];
    for (size_t c = 0; c < 9; ++c) mean.virial[c] += predictions[k].virial[c];
  }
  const double m = double(predictions.size());
  mean.energy /= m;
  for (double& f : mean.forces) f /= m;
  for (double& v : mean.virial) v /= m;
  return mean;
}

/// --select's tally: frames below LO, within [LO, HI), at or above HI.
struct Selection {
  int64_t below = 0, within = 0, above = 0;
};

}  // namespace

FrameDeviation frame_deviation(const std::vector<models::InferenceResult>& predictions, int64_t natoms,
                               std::optional<double> relative, std::optional<double> relative_v) {
  const size_t models = predictions.size(), n = size_t(natoms);
  FrameDeviation d;
  // Forces: each atom's deviation is the norm of its three components' deviations.
  std::vector<double> forces(3 * models);
  d.atom_devi_f.assign(n, 0.0);
  for (size_t a = 0; a < n; ++a) {
    for (size_t k = 0; k < models; ++k)
      for (size_t c = 0; c < 3; ++c) forces[3 * k + c] = predictions[k].forces[3 * a + c];
    d.atom_devi_f[a] = models::atom_force_deviation(forces.data(), models, relative);
  }
  if (n > 0) {
    d.max_devi_f = *std::max_element(d.atom_devi_f.begin(), d.atom_devi_f.end());
    d.min_devi_f = *std::min_element(d.atom_devi_f.begin(), d.atom_devi_f.end());
    double sum = 0;
    for (double v : d.atom_devi_f) sum += v;
    d.avg_devi_f = sum / double(n);
  }
  // The virial and the energy per atom.
  const double per_atom = n > 0 ? 1.0 / double(n) : 0.0;
  std::vector<double> virials(9 * models), energies(models);
  for (size_t k = 0; k < models; ++k) {
    for (size_t c = 0; c < 9; ++c) virials[9 * k + c] = predictions[k].virial[c] * per_atom;
    energies[k] = predictions[k].energy * per_atom;
  }
  const models::VirialDeviation v = models::virial_deviation(virials.data(), models, relative_v);
  d.max_devi_v = v.max;
  d.min_devi_v = v.min;
  d.avg_devi_v = v.avg;
  double mean;
  models::mean_and_deviation(energies.data(), models, mean, d.devi_e);
  return d;
}

std::string deviation_header(const std::string& system, bool atomic) {
  return "# " + system + "\n" + models::deviation_columns_line(true, atomic);
}

std::string deviation_row(int64_t step, const FrameDeviation& d, bool atomic) {
  return models::deviation_row(
      step, {d.max_devi_v, d.min_devi_v, d.avg_devi_v, d.max_devi_f, d.min_devi_f, d.avg_devi_f, d.devi_e},
      atomic ? d.atom_devi_f : std::vector<double>{});
}

int run_model_deviation(const DeviationOptions& options) {
  if (options.models.size() < 2)
    throw Error("model-devi: expected two or more models (-m m0.pt m1.pt ...), got " +
                std::to_string(options.models.size()));
  if (options.frequency < 1)
    throw Error("model-devi: -f: expected a positive number of steps between frames, got " +
                std::to_string(options.frequency));
  std::vector<Member> members;
  for (const auto& model : options.models) members.push_back(load_member(model));
  for (const auto& m : members)
    if (m.type_map != members[0].type_map)
      throw Error("model-devi: the models must have the same type map: " + members[0].path + " has [" +
                  joined(members[0].type_map) + "], " + m.path + " has [" + joined(m.type_map) + "]");
  std::vector<std::string> type_map = members[0].type_map;
  // Streamed: frames are read one at a time, so memory does not grow with the set (docs/data.md).
  data::LabelKeys keys = options.keys;
  keys.labels_optional = true;  // frames to predict on (an MD trajectory): labels are not needed
  const auto systems = data::load_systems(options.systems, type_map, "", data::Loading::kStreamed, keys);
  if (type_map.size() != members[0].type_map.size())
    throw Error("model-devi: the systems have types the models do not know (the models' type map: [" +
                joined(members[0].type_map) + "])");
  // The step of frame k is k * frequency: every system's last one must be a step the file can hold.
  for (const auto& sys : systems)
    if (sys.nframes > 1 && options.frequency > std::numeric_limits<int64_t>::max() / (sys.nframes - 1))
      throw Error("model-devi -f " + std::to_string(options.frequency) + ": the step of the last frame of " +
                  sys.name + " (frame " + std::to_string(sys.nframes - 1) + " x " +
                  std::to_string(options.frequency) + ") would be larger than the largest step, " +
                  std::to_string(std::numeric_limits<int64_t>::max()) + "; expected a smaller -f");
  archive::remove_stale_temporaries(std::filesystem::path(options.output).parent_path().string());
  if (options.select)
    archive::remove_stale_temporaries(std::filesystem::path(options.candidates).parent_path().string());
  archive::OutputFile out(options.output, archive::OutputFile::Mode::kReplace, "the model deviation file",
                          archive::SpecialTarget::kStream);
  // The models' graphs as written, never re-optimised by TorchScript's executor after their
  // first runs: a float32 model would otherwise predict the same frame differently in its last
  // bits at its first evaluation and later ones, and so deviate differently.
  torch::jit::GraphOptimizerEnabledGuard plain_graphs(false);
  data::NeighborListBuilder<double> builder;
  // Members that share a cutoff share the pairs: member k evaluates graphs[graph_of[k]].
  std::vector<size_t> graph_of(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    graph_of[k] = k;
    for (size_t j = 0; j < k && graph_of[k] == k; ++j)
      if (members[j].cutoff == members[k].cutoff) graph_of[k] = j;
  }
  std::vector<FrameGraph> graphs(members.size());
  std::vector<models::InferenceResult> predictions(members.size());
  std::unique_ptr<archive::OutputFile> candidates;
  if (options.select)
    candidates = std::make_unique<archive::OutputFile>(options.candidates, archive::OutputFile::Mode::kReplace,
                                                       "the candidates file", archive::SpecialTarget::kStream);
  Selection selection;
  for (const auto& sys : systems) {
    out.write(deviation_header(sys.name, options.atomic));
    double largest = 0;
    for (int64_t f = 0; f < sys.nframes; ++f) {
      const data::Frame frame = sys.frame(f);
      for (size_t k = 0; k < members.size(); ++k) {
        if (graph_of[k] == k) make_frame_graph(sys, frame, members[k].cutoff, builder, graphs[k]);
        models::Request request;
        request.graph = &graphs[graph_of[k]].graph;
        predictions[k] = members[k].inference->evaluate(request);
        check_finite_prediction("model-devi: " + members[k].path, sys, f, predictions[k]);
      }
      const FrameDeviation d = frame_deviation(predictions, sys.natoms(), options.relative, options.relative_v);
      largest = std::max(largest, d.max_devi_f);
      out.write(deviation_row(f * options.frequency, d, options.atomic));
      if (!options.select) continue;
      if (d.max_devi_f < options.select->first) {
        ++selection.below;
      } else if (d.max_devi_f >= options.select->second) {
        ++selection.above;
      } else {
        ++selection.within;
        // The geometry for a DFT code, with the committee's mean prediction beside it.
        const models::InferenceResult mean = mean_prediction(predictions);
        candidates->write(
            data::extxyz_frame(sys, frame, keys, "committee", mean.energy, mean.forces.data(), mean.virial.data()));
      }
    }
    std::printf("model-devi: %s: %lld frame(s), largest max_devi_f %.6e\n", sys.name.c_str(),
                static_cast<long long>(sys.nframes), largest);
  }
  out.commit();
  std::printf("model-devi: %zu model(s), %zu system(s); wrote %s\n", members.size(), systems.size(),
              options.output.c_str());
  if (options.select) {
    candidates->commit();
    std::printf(
        "model-devi: max_devi_f below %g: %lld frame(s); in [%g, %g): %lld, written to %s; at or above %g: "
        "%lld\n",
        options.select->first, static_cast<long long>(selection.below), options.select->first, options.select->second,
        static_cast<long long>(selection.within), options.candidates.c_str(), options.select->second,
        static_cast<long long>(selection.above));
  }
  return 0;
}

}  // namespace mlip::frozen
