#include "frozen/tester.h"

#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <iomanip>
#include <sstream>

#include "data/extxyz_writer.h"
#include "data/load.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "frozen/frame_graph.h"
#include "models/inference.h"
#include "models/torchscript_inference.h"
#include "archive/model_archive.h"
#include "archive/output_file.h"

namespace mlip::frozen {

using archive::ExtraFiles;
using archive::OutputFile;
using archive::SpecialTarget;
using archive::load_model;
using archive::remove_stale_temporaries;
using archive::resolve_checkpoint;
using archive::stored_type_names;
namespace {

/// MAE and RMSE accumulators.
struct Stat {
  double abs = 0, sq = 0;
  int64_t n = 0;
  void add(double d) { abs += std::abs(d), sq += d * d, ++n; }
  double mae() const { return n ? abs / double(n) : 0.0; }
  double rmse() const { return n ? std::sqrt(sq / double(n)) : 0.0; }
};

struct Metrics {
  Stat e, e_atom, f, v, v_atom;
  Stat q;  ///< per-atom charges, e (charge labels and a model with charges)
  int64_t frames = 0;
  /// Pools another set's errors into these (MAE and RMSE weighted by element counts).
  Metrics& operator+=(const Metrics& o) {
    for (auto [to, from] : {std::pair{&e, &o.e}, {&e_atom, &o.e_atom}, {&f, &o.f}, {&v, &o.v}, {&v_atom, &o.v_atom},
                              {&q, &o.q}})
      to->abs += from->abs, to->sq += from->sq, to->n += from->n;
    frames += o.frames;
    return *this;
  }
};

void print_metrics(const Metrics& m, bool energy, bool force, bool virial, bool charge) {
  if (energy) {
    std::printf("Energy MAE         : %e eV\n", m.e.mae());
    std::printf("Energy RMSE        : %e eV\n", m.e.rmse());
    std::printf("Energy MAE/Natoms  : %e eV\n", m.e_atom.mae());
    std::printf("Energy RMSE/Natoms : %e eV\n", m.e_atom.rmse());
  }
  if (force) {
    std::printf("Force  MAE         : %e eV/A\n", m.f.mae());
    std::printf("Force  RMSE        : %e eV/A\n", m.f.rmse());
  }
  if (virial) {
    std::printf("Virial MAE         : %e eV\n", m.v.mae());
    std::printf("Virial RMSE        : %e eV\n", m.v.rmse());
    std::printf("Virial MAE/Natoms  : %e eV\n", m.v_atom.mae());
    std::printf("Virial RMSE/Natoms : %e eV\n", m.v_atom.rmse());
  }
  if (charge) {
    std::printf("Charge MAE         : %e e\n", m.q.mae());
    std::printf("Charge RMSE        : %e e\n", m.q.rmse());
  }
}

/// The files `mlip test` writes besides its report: the detail files (-d) and the predictions as
/// extended XYZ (--xyz). Written beside their old versions and renamed over them at the end
/// (commit), so a failed run (a full disk) leaves the old ones whole (archive/output_file.h); a
/// FIFO or a character device is written into as a stream (docs/robustness.md "Special files").
class TestOutputs {
 public:
  /// labelled_charges: some system has charge labels (.q.out then has a data_q column).
  TestOutputs(const TestOptions& options, bool labelled_charges)
      : options_(options), labelled_charges_(labelled_charges) {
    using Mode = OutputFile::Mode;
    constexpr SpecialTarget kStream = SpecialTarget::kStream;
    if (!options.detail.empty()) {
      remove_stale_temporaries(std::filesystem::path(options.detail).parent_path().string());
      energy_ = std::make_unique<OutputFile>(options.detail + ".e.out", Mode::kReplace, "the energy detail file", kStream);
      energy_per_atom_ = std::make_unique<OutputFile>(options.detail + ".e_peratom.out", Mode::kReplace,
                                                      "the energy detail file", kStream);
      force_ = std::make_unique<OutputFile>(options.detail + ".f.out", Mode::kReplace, "the force detail file", kStream);
      energy_->write("# data_e pred_e\n");
      energy_per_atom_->write("# data_e pred_e\n");
      force_->write("# data_fx data_fy data_fz pred_fx pred_fy pred_fz\n");
      // The element of each row of .f.out (a file of its own: .f.out keeps dp test's columns).
      elements_ = std::make_unique<OutputFile>(options.detail + ".f_elements.out", Mode::kReplace,
                                               "the force detail file", kStream);
      elements_->write("# element of each row of " + options.detail + ".f.out\n");
    }
    if (!options.xyz.empty())
      xyz_ = std::make_unique<OutputFile>(options.xyz, Mode::kReplace, "the predictions file", kStream);
  }

  /// One frame's labels beside the prediction (energy eV, forces [N * 3] eV/Å, virial [9] eV,
  /// charges [N] e or null when the model has none).
  void write(const data::System& sys, const data::Frame& frame, double energy, const double* forces,
             const double* virial, const double* charges) {
    const int64_t n = sys.natoms();
    if (!options_.detail.empty() && charges != nullptr) write_charges(sys, frame, charges);
    if (energy_ && !frame.energy.empty()) {
      energy_->write(text([&](std::ostream& o) { o << frame.energy[0] << " " << energy << "\n"; }, 12));
      energy_per_atom_->write(
          text([&](std::ostream& o) { o << frame.energy[0] / double(n) << " " << energy / double(n) << "\n"; }, 12));
    }
    if (force_ && !frame.force.empty()) {
      const double* label = frame.force.data();
      force_->write(text([&](std::ostream& o) {
        for (int64_t a = 0; a < n; ++a)
          o << label[3 * a] << " " << label[3 * a + 1] << " " << label[3 * a + 2] << " " << forces[3 * a] << " "
            << forces[3 * a + 1] << " " << forces[3 * a + 2] << "\n";
      }, 10));
      elements_->write(text([&](std::ostream& o) {
        for (int64_t a = 0; a < n; ++a) o << sys.type_map[size_t(sys.types[size_t(a)])] << "\n";
      }, 10));
    }
    if (!options_.detail.empty() && !frame.virial.empty()) write_virial(frame.virial.data(), virial);
    if (xyz_) xyz_->write(data::extxyz_frame(sys, frame, options_.keys, "mlip", energy, forces, virial));
  }

  /// Renames every file over its old version.
  void commit() {
    for (auto* file : {energy_.get(), energy_per_atom_.get(), force_.get(), virial_.get(), elements_.get(), xyz_.get(),
                       charge_.get(), dipole_.get()})
      if (file) file->commit();
  }

 private:
  /// The text `print` writes, numbers to `digits` significant digits.
  template <typename Print>
  static std::string text(Print print, int digits) {
    std::ostringstream o;
    o << std::setprecision(digits);
    print(o);
    return o.str();
  }

  /// .q.out (each atom's charge and element; with charge labels in the test set, the label
  /// first, nan where a frame has none), made with the first frame that has charges, and, for
  /// frames without a cell, .dipole.out: Σ q_i r_i (docs/long_range.md "mlip test").
  void write_charges(const data::System& sys, const data::Frame& frame, const double* charges) {
    const int64_t n = sys.natoms();
    if (!charge_) {
      charge_ = std::make_unique<OutputFile>(options_.detail + ".q.out", OutputFile::Mode::kReplace,
                                             "the charge detail file", SpecialTarget::kStream);
      charge_->write(labelled_charges_ ? "# data_q pred_q (e) element\n" : "# pred_q (e) element\n");
    }
    charge_->write(text([&](std::ostream& o) {
      for (int64_t a = 0; a < n; ++a) {
        if (labelled_charges_) {
          if (frame.charge.empty()) o << "nan ";
          else o << frame.charge[size_t(a)] << " ";
        }
        o << charges[a] << " " << sys.type_map[size_t(sys.types[size_t(a)])] << "\n";
      }
    }, 10));
    if (frame.cell() != nullptr) return;
    if (!dipole_) {
      dipole_ = std::make_unique<OutputFile>(options_.detail + ".dipole.out", OutputFile::Mode::kReplace,
                                             "the dipole detail file", SpecialTarget::kStream);
      dipole_->write("# pred_dipole_x pred_dipole_y pred_dipole_z (e Å, sum of q r over the atoms of each frame without "
                     "a cell)\n");
    }
    double dipole[3] = {0, 0, 0};
    for (int64_t a = 0; a < n; ++a)
      for (int k = 0; k < 3; ++k) dipole[k] += charges[a] * frame.coord[size_t(3 * a + k)];
    dipole_->write(text([&](std::ostream& o) { o << dipole[0] << " " << dipole[1] << " " << dipole[2] << "\n"; }, 10));
  }

  /// .v.out, made with the first frame that has a virial label.
  void write_virial(const double* label, const double* virial) {
    if (!virial_) {
      virial_ = std::make_unique<OutputFile>(options_.detail + ".v.out", OutputFile::Mode::kReplace,
                                             "the virial detail file", SpecialTarget::kStream);
      virial_->write("# data_vxx data_vxy data_vxz data_vyx data_vyy data_vyz data_vzx data_vzy data_vzz pred_vxx pred_vxy "
                     "pred_vxz pred_vyx pred_vyy pred_vyz pred_vzx pred_vzy pred_vzz\n");
    }
    virial_->write(text([&](std::ostream& o) {
      for (int k = 0; k < 9; ++k) o << label[k] << " ";
      for (int k = 0; k < 9; ++k) o << virial[k] << (k < 8 ? " " : "\n");
    }, 10));
  }

  const TestOptions& options_;
  std::unique_ptr<OutputFile> energy_, energy_per_atom_, force_, virial_, elements_, xyz_, charge_, dipole_;
  bool labelled_charges_ = false;
};

/// A frame's errors into `m`: energy (and per atom), forces, virial (and per atom), charges,
/// where labelled (and, for charges, predicted).
void add_errors(const data::Frame& frame, int64_t natoms, const models::InferenceResult& out, Metrics& m) {
  if (!frame.charge.empty() && out.charges.size() == frame.charge.size())
    for (size_t a = 0; a < frame.charge.size(); ++a) m.q.add(out.charges[a] - frame.charge[a]);
  if (!frame.energy.empty()) {
    const double de = out.energy - frame.energy[0];
    m.e.add(de);
    m.e_atom.add(de / double(natoms));
  }
  if (!frame.force.empty())
    for (int64_t k = 0; k < natoms * 3; ++k) m.f.add(out.forces[size_t(k)] - frame.force[size_t(k)]);
  if (!frame.virial.empty())
    for (int k = 0; k < 9; ++k) {
      const double dv = out.virial[size_t(k)] - frame.virial[size_t(k)];
      m.v.add(dv);
      m.v_atom.add(dv / double(natoms));
    }
  ++m.frames;
}

/// One system's frames (the first numb_test, or all) through the model's forward: their errors,
/// each frame written to `outputs`.
Metrics test_system(const std::string& path, const data::System& sys, const TestOptions& options, double rcut,
                    models::Inference& inference, TestOutputs& outputs) {
  const int64_t nframes = options.numb_test > 0 ? std::min(options.numb_test, sys.nframes) : sys.nframes;
  data::NeighborListBuilder<double> builder;
  FrameGraph frame_graph;
  Metrics m;
  for (int64_t f = 0; f < nframes; ++f) {
    data::Frame frame = sys.frame(f);
    make_frame_graph(sys, frame, rcut, builder, frame_graph);
    models::Request request;
    request.graph = &frame_graph.graph;
    request.outputs.charges = true;
    const models::InferenceResult out = inference.evaluate(request);
    check_finite_prediction(path, sys, f, out);
    add_errors(frame, sys.natoms(), out, m);
    outputs.write(sys, frame, out.energy, out.forces.data(), out.virial.data(),
                  out.charges.empty() ? nullptr : out.charges.data());
  }
  return m;
}

/// The report's blocks after the systems': per config type (when there is more than the
/// default one) and the weighted average over all systems.
void print_summary(const std::map<std::string, Metrics>& by_type, const std::map<std::string, int64_t>& systems_of_type,
                   const Metrics& total, size_t systems, bool any_e, bool any_f, bool any_v, bool any_q) {
  if (by_type.size() > 1 || by_type.count("Default") == 0)
    for (const auto& [type, m] : by_type) {
      std::printf("# ----------config type %s-----------\n", type.c_str());
      std::printf("# number of systems : %ld, frames : %ld\n", long(systems_of_type.at(type)), long(m.frames));
      print_metrics(m, m.e.n > 0, m.f.n > 0, m.v.n > 0, m.q.n > 0);
      std::printf("# -----------------------------------------------\n");
    }
  std::printf("# ----------weighted average of errors-----------\n");
  std::printf("# number of systems : %zu\n", systems);
  print_metrics(total, any_e, any_f, any_v, any_q);
  std::printf("# -----------------------------------------------\n");
}

}  // namespace

int run_test(const TestOptions& options) {
  ExtraFiles extra;
  const std::string path = resolve_checkpoint(options.model);
  torch::jit::Module model = load_model(path, extra);
  model.eval();
  std::vector<std::string> type_map = stored_type_names(extra);
  const double rcut = std::stod(extra["r_max"]);
  const auto dtype = extra["model_dtype"] == "float32" ? torch::kFloat32 : torch::kFloat64;
  // Streamed: frames are read one at a time, so memory does not grow with the set (docs/data.md).
  auto systems = data::load_systems(options.systems, type_map, "", data::Loading::kStreamed, options.keys);
  if (type_map.size() != stored_type_names(extra).size())
    throw Error("test: the systems have types the model does not know (model type_map: " + extra["type_names"] + ")");
  bool labelled_charges = false;
  for (const auto& sys : systems) labelled_charges = labelled_charges || sys.has_charge;
  TestOutputs outputs(options, labelled_charges);
  // The model's own TorchScript forward, as plain PyTorch would call it (docs/deploy.md).
  models::TorchScriptInference inference(model, torch::kCPU, dtype, rcut);
  // Over systems: MAE weighted by element count, RMSE = sqrt(sum rmse^2 n / sum n); the same per
  // config type (extended XYZ's config_type, docs/data.md).
  Metrics total;
  std::map<std::string, Metrics> by_type;
  std::map<std::string, int64_t> systems_of_type;
  bool any_e = false, any_f = false, any_v = false, any_q = false;
  for (const auto& sys : systems) {
    const Metrics m = test_system(path, sys, options, rcut, inference, outputs);
    std::printf("# ---------------output of mlip test---------------\n");
    std::printf("# testing system : %s\n", sys.name.c_str());
    std::printf("# number of test data : %ld\n", long(m.frames));
    print_metrics(m, m.e.n > 0, m.f.n > 0, m.v.n > 0, m.q.n > 0);
    std::printf("# -----------------------------------------------\n");
    any_e |= m.e.n > 0, any_f |= m.f.n > 0, any_v |= m.v.n > 0, any_q |= m.q.n > 0;
    total += m;  // element-count weighting of MAE and RMSE^2 is the same as pooling the elements
    by_type[sys.config_type] += m;
    ++systems_of_type[sys.config_type];
  }
  outputs.commit();
  print_summary(by_type, systems_of_type, total, systems.size(), any_e, any_f, any_v, any_q);
  return 0;
}

}  // namespace mlip::frozen
