#include "frozen/change_bias.h"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "archive/model_archive.h"
#include "archive/output_file.h"
#include "archive/output_not_input.h"
#include "data/load.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "frozen/frame_graph.h"
#include "models/energy_shift.h"
#include "models/torchscript_inference.h"

namespace fs = std::filesystem;

namespace mlip::frozen {
namespace {

/// The type counts [frames, ntypes] and residual energies (label minus prediction) [frames] of
/// the request's systems under the model `path` (a separate copy of it: predicting may change
/// its mode).
void residual_energies(const ChangeBiasRequest& request, const std::string& path, torch::Tensor& counts,
                       torch::Tensor& residual) {
  archive::ExtraFiles extra;
  torch::jit::Module model = archive::load_model(path, extra);
  model.eval();
  const std::vector<std::string> model_types = archive::stored_type_names(extra);
  std::vector<std::string> type_map = model_types;
  auto systems = data::load_systems(request.systems, type_map, "", data::Loading::kStreamed, request.keys);
  if (type_map.size() != model_types.size()) {
    std::string extra_names;
    for (size_t t = model_types.size(); t < type_map.size(); ++t)
      extra_names += (extra_names.empty() ? "" : ", ") + type_map[t];
    throw Error("change-bias: the systems hold element(s) " + extra_names + " that " + path +
                " does not know (its type_map: " + extra["type_names"] + ")");
  }
  const double cutoff = std::stod(extra["r_max"]);
  const auto dtype = extra["model_dtype"] == "float32" ? torch::kFloat32 : torch::kFloat64;
  models::TorchScriptInference inference(model, torch::kCPU, dtype, cutoff);
  data::NeighborListBuilder<double> builder;
  FrameGraph frame_graph;
  std::vector<double> count_values, residual_values;
  for (const auto& sys : systems) {
    if (!sys.has_energy) throw Error("change-bias: " + sys.name + ": no energy labels; the re-fit needs them");
    std::vector<double> type_count(model_types.size(), 0.0);
    for (int t : sys.types) type_count[size_t(t)] += 1;
    const int64_t n = request.frames_per_system > 0 ? std::min(request.frames_per_system, sys.nframes) : sys.nframes;
    for (int64_t f = 0; f < n; ++f) {
      const data::Frame frame = sys.frame(f);
      make_frame_graph(sys, frame, cutoff, builder, frame_graph);
      models::Request one;
      one.graph = &frame_graph.graph;
      const models::InferenceResult out = inference.evaluate(one);
      check_finite_prediction("change-bias", sys, f, out);
      count_values.insert(count_values.end(), type_count.begin(), type_count.end());
      residual_values.push_back(frame.energy[0] - out.energy);
    }
  }
  const int64_t frames = int64_t(residual_values.size());
  if (frames == 0) throw Error("change-bias: the systems hold no frames");
  counts = torch::tensor(count_values, torch::kFloat64).reshape({frames, int64_t(model_types.size())});
  residual = torch::tensor(residual_values, torch::kFloat64);
}

}  // namespace

void change_bias(const ChangeBiasRequest& request, std::ostream& log) {
  if (request.systems.empty() == request.values.empty())
    throw Error("change-bias: expected either systems to re-fit the shifts to (-s) or values to set (-b), not " +
                std::string(request.systems.empty() ? "neither" : "both"));
  const std::string path = archive::resolve_checkpoint(request.model);
  std::vector<archive::ReadPath> inputs{{path, "the model being changed"}};
  for (const auto& system : request.systems) inputs.push_back({system, "the system"});
  archive::check_output_is_not_an_input(request.output, "change-bias -o " + request.output, inputs);
  archive::remove_stale_temporaries(fs::path(request.output).parent_path().string());
  archive::ExtraFiles extra;
  torch::jit::Module module = archive::load_model(path, extra);
  const std::string type = extra["model_type"];
  const std::vector<std::string> names = archive::stored_type_names(extra);
  const torch::Tensor before = models::energy_shift(module, type);
  torch::Tensor after = before.clone();
  std::ostringstream what;
  if (!request.values.empty()) {
    for (const auto& [element, value] : request.values) {
      const auto it = std::find(names.begin(), names.end(), element);
      if (it == names.end())
        throw Error("change-bias -b " + element + ": not an element of " + path +
                    " (its type_map: " + extra["type_names"] + ")");
      after[it - names.begin()] = value;
    }
    what << "set by -b";
  } else {
    torch::Tensor counts, residual;
    residual_energies(request, path, counts, residual);
    after = before + models::shift_change(counts, residual, names, log);
    what << "re-fitted to " << counts.size(0) << " frame(s) of";
    for (const auto& s : request.systems) what << " " << s;
  }
  try {
    models::set_energy_shift(module, type, after, names);
  } catch (const Error& e) {
    throw Error("change-bias " + path + ": " + std::string(e.what()) + "; nothing was written");
  }
  // Read back: the model's dtype rounds the values (float32: about 7 digits).
  after = models::energy_shift(module, type);
  log << "energy shifts (eV per atom) before: " << models::shifts_text(before, names) << "\n"
      << "energy shifts (eV per atom) after:  " << models::shifts_text(after, names) << "\n";
  std::ostringstream record;
  record << "source " << path << "\n"
         << what.str() << "\nbefore " << models::shifts_text(before, names) << "\nafter "
         << models::shifts_text(after, names) << "\n";
  if (extra.count("change_bias")) record << "earlier:\n" << extra["change_bias"];
  extra["change_bias"] = record.str();
  archive::save_module_atomically(module, extra, request.output, "the model with changed energy shifts");
}

}  // namespace mlip::frozen
