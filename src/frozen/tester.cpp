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
#include "models/inference.h"
#include "models/pair_list.h"
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
  int64_t frames = 0;
  /// Pools another set's errors into these (MAE and RMSE weighted by element counts).
  Metrics& operator+=(const Metrics& o) {
    for (auto [to, from] : {std::pair{&e, &o.e}, {&e_atom, &o.e_atom}, {&f, &o.f}, {&v, &o.v}, {&v_atom, &o.v_atom}})
      to->abs += from->abs, to->sq += from->sq, to->n += from->n;
    frames += o.frames;
    return *this;
  }
};

void print_metrics(const Metrics& m, bool energy, bool force, bool virial) {
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
}

/// A frame's pairs as the graph the TorchScript forward evaluates (models/inference.h): its
/// positions, its cell (or none) and each pair's integer cell shift.
struct FrameGraph {
  std::vector<int64_t> centre, neighbour;  ///< [npairs] atom indices
  models::AtomGraph graph;                 ///< points into these, the frame, its pairs and the types
};

void fill_frame_graph(const data::System& sys, const data::Frame& frame, const models::PairList& pairs,
                      const std::vector<int64_t>& types, FrameGraph& out) {
  const int64_t npairs = pairs.npairs();
  out.centre.assign(pairs.centre.data_ptr<int64_t>(), pairs.centre.data_ptr<int64_t>() + npairs);
  out.neighbour.assign(pairs.neighbor.data_ptr<int64_t>(), pairs.neighbor.data_ptr<int64_t>() + npairs);
  models::AtomGraph& g = out.graph;
  g = models::AtomGraph();
  g.nodes = sys.natoms();
  g.nlocal = g.nodes;
  g.types = types.data();
  g.npairs = npairs;
  g.centre = out.centre.data();
  g.neighbour = out.neighbour.data();
  g.positions = frame.coord.data();
  // A frame without a cell has no periodic images: no shifts (a zero cell).
  if (frame.cell() != nullptr) {
    g.cell = frame.box.data();
    g.shifts = pairs.shift.data_ptr<double>();
  }
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

  // Detail files: written beside their old versions and renamed over them at the end, so a
  // failed run (a full disk) leaves the old ones whole (archive/output_file.h).
  std::unique_ptr<OutputFile> fe, fea, ff, fv, fel;
  if (!options.detail.empty()) {
    using Mode = OutputFile::Mode;
    // A FIFO or a character device is written into as a stream (docs/robustness.md "Special files").
    constexpr SpecialTarget kStream = SpecialTarget::kStream;
    remove_stale_temporaries(std::filesystem::path(options.detail).parent_path().string());
    fe = std::make_unique<OutputFile>(options.detail + ".e.out", Mode::kReplace, "the energy detail file", kStream);
    fea = std::make_unique<OutputFile>(options.detail + ".e_peratom.out", Mode::kReplace, "the energy detail file", kStream);
    ff = std::make_unique<OutputFile>(options.detail + ".f.out", Mode::kReplace, "the force detail file", kStream);
    fe->write("# data_e pred_e\n");
    fea->write("# data_e pred_e\n");
    ff->write("# data_fx data_fy data_fz pred_fx pred_fy pred_fz\n");
    // The element of each row of .f.out (a file of its own: .f.out keeps dp test's columns).
    fel = std::make_unique<OutputFile>(options.detail + ".f_elements.out", Mode::kReplace, "the force detail file",
                                       kStream);
    fel->write("# element of each row of " + options.detail + ".f.out\n");
  }
  std::unique_ptr<OutputFile> fxyz;
  if (!options.xyz.empty())
    fxyz = std::make_unique<OutputFile>(options.xyz, OutputFile::Mode::kReplace, "the predictions file",
                                        SpecialTarget::kStream);
  std::ostringstream line;
  // Over systems: MAE weighted by element count, RMSE = sqrt(sum rmse^2 n / sum n); the same per
  // config type (extended XYZ's config_type, docs/data.md).
  Metrics total;
  std::map<std::string, Metrics> by_type;
  std::map<std::string, int64_t> systems_of_type;
  bool any_e = false, any_f = false, any_v = false;
  data::NeighborListBuilder<double> builder;
  // The model's own TorchScript forward, as plain PyTorch would call it (docs/deploy.md).
  models::TorchScriptInference inference(model, torch::kCPU, dtype, rcut);
  FrameGraph frame_graph;
  for (const auto& sys : systems) {
    const int64_t nframes = options.numb_test > 0 ? std::min(options.numb_test, sys.nframes) : sys.nframes;
    const int64_t n = sys.natoms();
    Metrics m;
    const std::vector<int64_t> types(sys.types.begin(), sys.types.end());
    for (int64_t f = 0; f < nframes; ++f) {
      data::Frame frame = sys.frame(f);
      const models::PairList pairs = models::pair_list(builder.build(frame.coord.data(), n, frame.cell(), sys.pbc, rcut));
      fill_frame_graph(sys, frame, pairs, types, frame_graph);
      models::Request request;
      request.graph = &frame_graph.graph;
      const models::InferenceResult out = inference.evaluate(request);
      const double e_pred = out.energy;
      const torch::Tensor forces = torch::tensor(out.forces, torch::kFloat64);
      const torch::Tensor virial = torch::tensor(std::vector<double>(out.virial.begin(), out.virial.end()), torch::kFloat64);
      if (!std::isfinite(e_pred) || !torch::isfinite(forces).all().item<bool>() ||
          !torch::isfinite(virial).all().item<bool>()) {
        std::ostringstream m;
        m << path << ": system " << sys.name << ": frame " << f << ": the model's prediction is not finite (energy "
          << (std::isnan(e_pred) ? std::string("NaN") : std::to_string(e_pred)) << "); no errors are reported from a prediction that is NaN or Inf";
        throw Error(m.str());
      }
      if (!frame.energy.empty()) {
        const double de = e_pred - frame.energy[0];
        m.e.add(de);
        m.e_atom.add(de / double(n));
        if (fe) {
          line.str("");
          line << std::setprecision(12) << frame.energy[0] << " " << e_pred << "\n";
          fe->write(line.str());
          line.str("");
          line << std::setprecision(12) << frame.energy[0] / double(n) << " " << e_pred / double(n) << "\n";
          fea->write(line.str());
        }
      }
      const double* fp = forces.data_ptr<double>();
      if (!frame.force.empty()) {
        const double* fl = frame.force.data();
        for (int64_t k = 0; k < n * 3; ++k) m.f.add(fp[k] - fl[k]);
        if (ff) {
          line.str("");
          for (int64_t a = 0; a < n; ++a)
            line << std::setprecision(10) << fl[3 * a] << " " << fl[3 * a + 1] << " " << fl[3 * a + 2] << " "
                 << fp[3 * a] << " " << fp[3 * a + 1] << " " << fp[3 * a + 2] << "\n";
          ff->write(line.str());
          line.str("");
          for (int64_t a = 0; a < n; ++a) line << sys.type_map[size_t(sys.types[size_t(a)])] << "\n";
          fel->write(line.str());
        }
      }
      if (!frame.virial.empty()) {
        const double* vp = virial.data_ptr<double>();
        const double* vl = frame.virial.data();
        for (int k = 0; k < 9; ++k) {
          m.v.add(vp[k] - vl[k]);
          m.v_atom.add((vp[k] - vl[k]) / double(n));
        }
        if (!options.detail.empty()) {
          if (!fv) {
            fv = std::make_unique<OutputFile>(options.detail + ".v.out", OutputFile::Mode::kReplace,
                                              "the virial detail file", SpecialTarget::kStream);
            fv->write("# data_vxx data_vxy data_vxz data_vyx data_vyy data_vyz data_vzx data_vzy data_vzz pred_vxx pred_vxy "
                      "pred_vxz pred_vyx pred_vyy pred_vyz pred_vzx pred_vzy pred_vzz\n");
          }
          line.str("");
          for (int k = 0; k < 9; ++k) line << std::setprecision(10) << vl[k] << " ";
          for (int k = 0; k < 9; ++k) line << std::setprecision(10) << vp[k] << (k < 8 ? " " : "\n");
          fv->write(line.str());
        }
      }
      if (fxyz) fxyz->write(data::extxyz_frame(sys, frame, options.keys, "mlip", e_pred, forces.data_ptr<double>(),
                                                virial.data_ptr<double>()));
      ++m.frames;
    }
    std::printf("# ---------------output of mlip test---------------\n");
    std::printf("# testing system : %s\n", sys.name.c_str());
    std::printf("# number of test data : %ld\n", long(m.frames));
    print_metrics(m, m.e.n > 0, m.f.n > 0, m.v.n > 0);
    std::printf("# -----------------------------------------------\n");
    any_e |= m.e.n > 0, any_f |= m.f.n > 0, any_v |= m.v.n > 0;
    total += m;  // element-count weighting of MAE and RMSE^2 is the same as pooling the elements
    by_type[sys.config_type] += m;
    ++systems_of_type[sys.config_type];
  }
  for (auto* file : {fe.get(), fea.get(), ff.get(), fv.get(), fel.get(), fxyz.get()})
    if (file) file->commit();
  if (by_type.size() > 1 || by_type.count("Default") == 0)
    for (const auto& [type, m] : by_type) {
      std::printf("# ----------config type %s-----------\n", type.c_str());
      std::printf("# number of systems : %ld, frames : %ld\n", long(systems_of_type[type]), long(m.frames));
      print_metrics(m, m.e.n > 0, m.f.n > 0, m.v.n > 0);
      std::printf("# -----------------------------------------------\n");
    }
  std::printf("# ----------weighted average of errors-----------\n");
  std::printf("# number of systems : %zu\n", systems.size());
  print_metrics(total, any_e, any_f, any_v);
  std::printf("# -----------------------------------------------\n");
  return 0;
}

}  // namespace mlip::frozen
