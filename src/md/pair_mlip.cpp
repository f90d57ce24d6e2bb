#include "md/pair_mlip.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>

// LAMMPS
#include <lammps/error.h>  // by its folder: "error.h" is mlip's own (src/error.h)

#include "archive/output_not_input.h"
#include "atom.h"
#include "comm.h"
#include "domain.h"
#include "compat/blas_kernels.h"
#include "force.h"
#include "memory.h"
#include "update.h"
#include "utils.h"

namespace mlip::md {

using namespace LAMMPS_NS;

PairMlip::PairMlip(LAMMPS* lmp) : Pair(lmp) {
  restartinfo = 0;
  single_enable = 0;
  one_coeff = 1;
  manybody_flag = 1;
  no_virial_fdotr_compute = 1;  // the model gives the virial of its pairs
}

namespace {

/// This process's peak resident memory (VmHWM of /proc/self/status), MB; 0 where unknown.
double peak_memory_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

}  // namespace

PairMlip::~PairMlip() {
  // Where the time went on rank 0 (docs/lammps.md "Speed"); LAMMPS' own breakdown has the rest.
  // Every rank destroys the pair style at the same point, so the peaks can be summed.
  if (potential_ && potential_->timings().calls > 0) {
    const double mine = peak_memory_mb();
    double all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, 0, world);
    if (comm->me == 0) {
      const Timings& t = potential_->timings();
      char line[400];
      std::snprintf(line, sizeof line,
                    "pair_style mlip on rank 0: %lld calls, neighbour list %.3f s, model %.3f s, %.1f atoms "
                    "evaluated per call, peak memory %.0f MB (all %d ranks: %.0f MB)\n",
                    static_cast<long long>(t.calls), t.neighbor_list, t.model, double(t.model_atoms) / double(t.calls),
                    mine, comm->nprocs, all);
      utils::logmesg(lmp, std::string(line));
      if (potential_->long_range()) {
        std::snprintf(line, sizeof line,
                      "pair_style mlip on rank 0: of the model's time, the long-range term %.3f s (%s, its sums over "
                      "the ranks included)\n",
                      t.long_range,
                      potential_->long_range_solver() == LongRangeSolver::kMesh    ? "on the mesh"
                      : potential_->long_range_solver() == LongRangeSolver::kEwald ? "the k-vector sum"
                                                                                   : "not yet chosen");
        utils::logmesg(lmp, std::string(line));
      }
      // What the committee's other models cost: paid on the output steps only.
      if (!committee_.empty()) {
        Timings others;
        for (const auto& member : committee_) {
          others.neighbor_list += member->timings().neighbor_list;
          others.model += member->timings().model;
        }
        std::snprintf(line, sizeof line,
                      "pair_style mlip on rank 0: the committee's other %zu model(s) on %lld output step(s): "
                      "neighbour list %.3f s, model %.3f s\n",
                      committee_.size(), static_cast<long long>(deviation_steps_), others.neighbor_list, others.model);
        utils::logmesg(lmp, std::string(line));
      }
    }
    for (size_t k = 0; k < counters_.size(); ++k) {
      long long mine_count = static_cast<long long>(counts_run_[k]), all_count = 0;
      MPI_Reduce(&mine_count, &all_count, 1, MPI_LONG_LONG, MPI_SUM, 0, world);
      if (comm->me == 0)
        utils::logmesg(lmp, "pair_style mlip: " + std::to_string(all_count) + " " + counters_[k].run_phrase + "\n");
    }
  }
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

Pair* PairMlip::create(LAMMPS* lmp) { return new PairMlip(lmp); }

void PairMlip::fail(const std::string& message) {
  error->all(FLERR, "pair_style mlip: " + message);
  throw std::logic_error("unreachable");  // Error::all does not return; this tells the compiler
}

void PairMlip::allocate() {
  allocated = 1;
  const int n = atom->ntypes;
  memory->create(setflag, n + 1, n + 1, "pair:setflag");
  memory->create(cutsq, n + 1, n + 1, "pair:cutsq");
  for (int i = 1; i <= n; ++i)
    for (int j = i; j <= n; ++j) setflag[i][j] = 0;
}

namespace {

const char* kUsage =
    "'pair_style mlip <frozen_model.pt> [<more models> ...] [device cpu|cuda|cuda:K] [evaluation auto|torchscript] "
    "[exchange yes|no] [pairs auto|host|device] [kspace auto|ewald|mesh] [out_freq N] [out_file F] [atomic] "
    "[relative L] [relative_v L]'";

bool is_keyword(const std::string& word) {
  for (const char* k :
       {"device", "evaluation", "exchange", "pairs", "kspace", "out_freq", "out_file", "atomic", "relative", "relative_v"})
    if (word == k) return true;
  return false;
}

/// A length as printf's %g writes it (6 Å, 4.5 Å).
std::string shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

/// `text` as a finite number, or an empty optional.
std::optional<double> number_after(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

void PairMlip::read_settings(int narg, char** arg, std::vector<std::string>& models, std::string& device,
                             Evaluation& evaluation, PairBuilding& pairs, bool& committee_keywords) {
  // The model files come first: the first argument, then every one up to the first keyword that
  // names a file or ends in .pt (so that a misspelt keyword is reported as one).
  int k = 0;
  auto model_file = [](const std::string& word) {
    return (word.size() > 3 && word.compare(word.size() - 3, 3, ".pt") == 0) || std::filesystem::exists(word);
  };
  while (k < narg && !is_keyword(arg[k]) && (k == 0 || model_file(arg[k]))) models.emplace_back(arg[k++]);
  if (models.empty()) fail(std::string("expected ") + kUsage + ", got no model file");
  while (k < narg) {
    const std::string key = arg[k++];
    if (!is_keyword(key))
      fail(
          "expected another model file or a keyword (device, evaluation, exchange, pairs, kspace, out_freq, out_file, "
          "atomic, relative, relative_v) after the model files (" +
          std::string(kUsage) + "), got '" + key + "'");
    if (key == "atomic") {
      deviation_settings_.atomic = committee_keywords = true;
      continue;
    }
    if (k == narg) fail(key + ": expected a value after it (" + std::string(kUsage) + ")");
    const std::string value = arg[k++];
    if (key == "device") {
      device = value;
    } else if (key == "evaluation") {
      if (value == "auto")
        evaluation = Evaluation::kAuto;
      else if (value == "torchscript")
        evaluation = Evaluation::kTorchScript;
      else
        fail("evaluation: expected auto or torchscript, got '" + value + "'");
    } else if (key == "exchange") {
      if (value == "yes")
        allow_exchange_ = true;
      else if (value == "no")
        allow_exchange_ = false;
      else
        fail("exchange: expected yes or no, got '" + value + "'");
    } else if (key == "pairs") {
      if (value == "auto")
        pairs = PairBuilding::kAuto;
      else if (value == "host")
        pairs = PairBuilding::kHost;
      else if (value == "device")
        pairs = PairBuilding::kDevice;
      else
        fail("pairs: expected auto, host or device, got '" + value + "'");
    } else if (key == "kspace") {
      if (value == "auto")
        solver_ = LongRangeSolver::kAuto;
      else if (value == "ewald")
        solver_ = LongRangeSolver::kEwald;
      else if (value == "mesh")
        solver_ = LongRangeSolver::kMesh;
      else
        fail("kspace: expected auto, ewald or mesh, got '" + value + "'");
    } else if (key == "out_file") {
      deviation_settings_.out_file = value;
      committee_keywords = true;
    } else {
      const std::optional<double> number = number_after(value);
      committee_keywords = true;
      if (key == "out_freq") {
        if (!number || *number < 1 || *number != std::floor(*number) || *number > 1e15)
          fail("out_freq: expected a positive whole number of steps, got '" + value + "'");
        deviation_settings_.out_freq = int64_t(*number);
      } else {
        if (!number || *number < 0)
          fail(key + ": expected a number >= 0 (" + (key == "relative" ? "eV/Å" : "eV") + "), got '" + value + "'");
        (key == "relative" ? deviation_settings_.relative : deviation_settings_.relative_v) = *number;
      }
    }
  }
}

void PairMlip::load_committee(const std::vector<std::string>& models, const std::string& device, Evaluation evaluation,
                              PairBuilding pairs) {
  auto names_of = [](const Potential& p) {
    std::string s;
    for (const auto& n : p.type_names()) s += (s.empty() ? "" : " ") + n;
    return s;
  };
  for (size_t k = 1; k < models.size(); ++k) {
    std::unique_ptr<Potential> member;
    try {
      member = std::make_unique<Potential>(models[k], device, evaluation, pairs);
    } catch (const std::exception& e) {
      fail(e.what());
    }
    if (member->type_names() != potential_->type_names())
      fail("the models of a committee must have the same type map: " + model_path_ + " has [" + names_of(*potential_) +
           "], " + models[k] + " has [" + names_of(*member) + "]");
    if (std::fabs(member->cutoff() - potential_->cutoff()) > 1e-12 * std::max(1.0, potential_->cutoff()))
      fail("the models of a committee must have the same cutoff: " + model_path_ + " has " +
           shortest(potential_->cutoff()) + " Å, " + models[k] + " has " + shortest(member->cutoff()) + " Å");
    if (comm->me == 0) utils::logmesg(lmp, "pair_style mlip: " + models[k] + ": " + member->describe() + "\n");
    committee_paths_.push_back(models[k]);
    committee_.push_back(std::move(member));
  }
}

void PairMlip::settings(int narg, char** arg) {
  std::vector<std::string> models;
  std::string device = "cpu";
  Evaluation evaluation = Evaluation::kAuto;
  PairBuilding pairs = PairBuilding::kAuto;
  bool committee_keywords = false;
  potential_.reset();
  solver_ = LongRangeSolver::kAuto;
  committee_.clear();
  committee_paths_.clear();
  deviation_file_.reset();
  deviation_settings_ = DeviationSettings{};
  read_settings(narg, arg, models, device, evaluation, pairs, committee_keywords);
  if (committee_keywords && models.size() < 2)
    fail(
        "out_freq, out_file, atomic, relative and relative_v write a committee's model deviation: expected two "
        "or more model files, got one (" +
        models[0] + ")");
  if (models.size() >= 2) {
    // The deviation file is opened (truncated) once the models are read: never one of them.
    std::vector<archive::ReadPath> inputs;
    for (const std::string& model : models) inputs.push_back({model, "the model"});
    try {
      archive::check_output_is_not_an_input(deviation_settings_.out_file, "out_file " + deviation_settings_.out_file,
                                            inputs);
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  if (std::strcmp(update->unit_style, "metal") != 0)
    fail("the model works in eV and Å: expected 'units metal', got 'units " + std::string(update->unit_style) + "'");
  if (deviation_settings_.atomic && atom->tag_enable == 0)
    fail("atomic: the deviation of each atom is written in id order, but the atoms have no ids (atom_modify id no)");
  model_path_ = models[0];
  // Once per process, before the model's first matrix product (docs/device.md "The BLAS kernels
  // on a CPU OpenBLAS does not know").
  static const compat::BlasKernelChoice blas = compat::use_the_cpus_blas_kernels();
  const std::string blas_note = compat::blas_kernels_note();  // also what `mlip lammps`'s main() did
  if (comm->me == 0 && (blas_note.find("switched from") != std::string::npos || compat::core_lacks_avx2(blas.after)))
    utils::logmesg(lmp, "pair_style mlip: BLAS: " + blas_note + "\n");
  try {
    potential_ = std::make_unique<Potential>(model_path_, device, evaluation, pairs);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (comm->me == 0) utils::logmesg(lmp, "pair_style mlip: " + model_path_ + ": " + potential_->describe() + "\n");
  potential_->set_long_range_solver(solver_);
  load_committee(models, device, evaluation, pairs);
  for (auto& member : committee_) member->set_long_range_solver(solver_);
  if (!committee_.empty()) {
    try {
      deviation_file_ = std::make_unique<DeviationFile>(deviation_settings_, world);
    } catch (const std::exception& e) {
      fail(e.what());
    }
    if (comm->me == 0)
      utils::logmesg(lmp, "pair_style mlip: a committee of " + std::to_string(models.size()) +
                              " models: " + model_path_ + " drives the MD, the others run every " +
                              std::to_string(deviation_settings_.out_freq) + " steps; deviations to " +
                              deviation_settings_.out_file + "\n");
  }
  // Known now, not only at init_style(): pair_style hybrid takes its sub-styles' communication
  // sizes right after their settings(), and LAMMPS sizes its buffers from those.
  set_communication_sizes();
  counters_ = potential_->counters();
  counts_run_.assign(counters_.size(), 0);
  counts_unreported_.assign(counters_.size(), 0);
  last_report_step_.assign(counters_.size(), -1);
}

void PairMlip::coeff(int narg, char** arg) {
  if (!allocated) allocate();
  const int ntypes = atom->ntypes;
  const auto& names = potential_->type_names();
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : " ") + n;
  if (narg != 2 + ntypes || std::strcmp(arg[0], "*") != 0 || std::strcmp(arg[1], "*") != 0)
    fail("expected 'pair_coeff * * <name>' with one of the model's type names (" + known + ") for each of the " +
         std::to_string(ntypes) + " atom type(s)");
  model_type_of_.assign(size_t(ntypes + 1), -1);
  for (int k = 1; k <= ntypes; ++k) {
    const std::string name = arg[1 + k];
    for (size_t t = 0; t < names.size(); ++t)
      if (names[t] == name) model_type_of_[size_t(k)] = int(t);
    if (model_type_of_[size_t(k)] < 0)
      fail("pair_coeff: atom type " + std::to_string(k) + " is '" + name + "', which is not in the model (" + known +
           ")");
  }
  for (int i = 1; i <= ntypes; ++i)
    for (int j = i; j <= ntypes; ++j) setflag[i][j] = 1;
}

void PairMlip::set_communication_sizes() {
  exchange_ = allow_exchange_ && potential_->exchange_width() > 0;
  comm_forward = comm_reverse = exchange_ ? int(potential_->exchange_width()) : 0;
  // A committee's other models exchange their own features on output steps, and every model's
  // forces on the ghosts go back to their owners in one reverse communication of [models * 3].
  committee_exchange_.clear();
  for (const auto& member : committee_) {
    committee_exchange_.push_back(allow_exchange_ && member->exchange_width() > 0);
    if (committee_exchange_.back()) comm_forward = std::max(comm_forward, int(member->exchange_width()));
    if (committee_exchange_.back()) comm_reverse = std::max(comm_reverse, int(member->exchange_width()));
  }
  if (!committee_.empty()) comm_reverse = std::max(comm_reverse, 3 * int(committee_.size() + 1));
}

void PairMlip::init_style() {
  if (!potential_) fail("no model (pair_style mlip <frozen_model.pt>)");
  potential_->reset_timings();  // each run's own (printed when LAMMPS ends)
  if (force->newton_pair == 0) fail("expected 'newton on': the forces on ghost atoms must go back to their owners");
  if (std::strcmp(update->unit_style, "metal") != 0)
    fail("the model works in eV and Å: expected 'units metal', got 'units " + std::string(update->unit_style) + "'");
  // atom_style charge: a model with charges writes them into q (docs/lammps.md "Long range across ranks").
  if (std::strcmp(atom->atom_style, "atomic") != 0 && std::strcmp(atom->atom_style, "charge") != 0)
    fail("expected 'atom_style atomic' or 'atom_style charge', got 'atom_style " + std::string(atom->atom_style) + "'");
  // No LAMMPS neighbour list: Potential builds the pairs of owned and ghost atoms itself
  // (docs/lammps.md "Neighbour list"). The ghost cutoff comes from init_one().
  set_communication_sizes();
  for (const auto& member : committee_) member->reset_timings();
  deviation_steps_ = 0;
  if (comm->me == 0 && exchange_)
    utils::logmesg(lmp, "pair_style mlip: " + std::to_string(potential_->message_layers()) +
                            " message-passing layers, features exchanged between them (up to " +
                            std::to_string(comm_forward) + " values per atom): ghost atoms within " +
                            std::to_string(potential_->ghost_cutoff(true)) + " Å (r_max) + the neighbour skin\n");
  else if (comm->me == 0 && potential_->message_layers() > 1)
    utils::logmesg(lmp, "pair_style mlip: " + std::to_string(potential_->message_layers()) +
                            " message-passing layers: ghost atoms within " +
                            std::to_string(potential_->ghost_cutoff()) + " Å (layers x r_max) + the neighbour skin\n");
}

double PairMlip::init_one(int i, int j) {
  if (setflag[i][j] == 0) fail("pair_coeff * * <names> has not been given");
  double cutoff = potential_->ghost_cutoff(exchange_);
  for (size_t k = 0; k < committee_.size(); ++k)
    cutoff = std::max(cutoff, committee_[k]->ghost_cutoff(committee_exchange_[k]));
  return cutoff;
}

void PairMlip::forward(double* rows, int64_t width) {
  exchange_rows_ = rows;
  exchange_width_ = int(width);
  comm_forward = exchange_width_;  // at most the width comm->init() sized the buffers for
  comm->forward_comm_pair(this);
}

void PairMlip::reverse(double* rows, int64_t width) {
  exchange_rows_ = rows;
  exchange_width_ = int(width);
  comm_reverse = exchange_width_;
  comm->reverse_comm_pair(this);
}

int PairMlip::pack_forward_comm(int n, int* list, double* buf, int /*pbc_flag*/, int* /*pbc*/) {
  const int w = exchange_width_;
  for (int k = 0; k < n; ++k)
    std::memcpy(buf + size_t(k) * w, exchange_rows_ + size_t(list[k]) * w, sizeof(double) * w);
  return n * w;
}

void PairMlip::unpack_forward_comm(int n, int first, double* buf) {
  const int w = exchange_width_;
  std::memcpy(exchange_rows_ + size_t(first) * w, buf, sizeof(double) * size_t(n) * w);
}

int PairMlip::pack_reverse_comm(int n, int first, double* buf) {
  const int w = exchange_width_;
  std::memcpy(buf, exchange_rows_ + size_t(first) * w, sizeof(double) * size_t(n) * w);
  return n * w;
}

void PairMlip::unpack_reverse_comm(int n, int* list, double* buf) {
  const int w = exchange_width_;
  for (int k = 0; k < n; ++k) {
    double* row = exchange_rows_ + size_t(list[k]) * w;
    for (int c = 0; c < w; ++c) row[c] += buf[size_t(k) * w + c];
  }
}

void PairMlip::report_interval(size_t k) {
  // Collective: every rank calls compute() on the same steps.
  long long mine = static_cast<long long>(counts_unreported_[k]), all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, world);
  counts_unreported_[k] = 0;
  const int64_t from = last_report_step_[k] + 1, to = int64_t(update->ntimestep);
  last_report_step_[k] = to;
  if (all > 0 && comm->me == 0)
    error->warning(FLERR, "pair_style mlip: steps " + std::to_string(from) + "-" + std::to_string(to) + ": " +
                              std::to_string(all) + " " + counters_[k].interval_phrase);
}

void PairMlip::count(const std::vector<int64_t>& counts) {
  for (size_t k = 0; k < counters_.size() && k < counts.size(); ++k) {
    counts_run_[k] += counts[k];
    counts_unreported_[k] += counts[k];
    // Every report_every steps (step 0, the set-up's call, counts into the first report), once per step.
    const int64_t every = counters_[k].report_every;
    if (every > 0 && update->ntimestep > 0 && update->ntimestep % every == 0 &&
        int64_t(update->ntimestep) > last_report_step_[k])
      report_interval(k);
  }
}

void PairMlip::compute(int eflag, int vflag) {
  ev_init(eflag, vflag);
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  types_.resize(size_t(nall));
  for (int i = 0; i < nall; ++i) types_[size_t(i)] = model_type_of_[size_t(atom->type[i])];
  LocalAtoms atoms;
  atoms.positions = nall > 0 ? &atom->x[0][0] : nullptr;
  atoms.types = types_.data();
  atoms.natoms = nall;
  atoms.nlocal = nlocal;
  if (atom->tag_enable) {  // ghosts imaging a present atom are folded onto it (docs/lammps.md)
    ids_.resize(size_t(nall));
    for (int i = 0; i < nall; ++i) ids_[size_t(i)] = int64_t(atom->tag[i]);
    atoms.ids = ids_.data();
  }
  if (exchange_) atoms.exchange = this;
  if (potential_->long_range()) set_box(atoms);
  try {
    potential_->compute(atoms, eflag_atom != 0, vflag_atom != 0, results_);
  } catch (const std::exception& e) {
    error->one(FLERR, "pair_style mlip: step " + std::to_string(update->ntimestep) + ": " + e.what());
  }
  count(results_.counts);
  if (atom->q_flag && !results_.charges.empty())  // the owned atoms' charges, this step's
    for (int i = 0; i < nlocal; ++i) atom->q[i] = results_.charges[size_t(i)];
  if (deviation_file_ && update->ntimestep % deviation_settings_.out_freq == 0 &&
      int64_t(update->ntimestep) != last_deviation_step_)
    write_deviation(atoms);
  double** f = atom->f;
  for (int i = 0; i < nall; ++i)
    for (int k = 0; k < 3; ++k) f[i][k] += results_.forces[size_t(i * 3 + k)];
  if (eflag_global) eng_vdwl += results_.energy;
  if (eflag_atom)
    for (int i = 0; i < nlocal; ++i) eatom[i] += results_.atomic_energy[size_t(i)];
  // LAMMPS' order: xx, yy, zz, xy, xz, yz.
  static constexpr int kVoigt[6] = {0, 4, 8, 1, 2, 5};
  if (vflag_global)
    for (int k = 0; k < 6; ++k) virial[k] += results_.virial[size_t(kVoigt[k])];
  if (vflag_atom)
    for (int i = 0; i < nall; ++i)
      for (int k = 0; k < 6; ++k) vatom[i][k] += results_.atom_virial[size_t(i * 9 + kVoigt[k])];
}

void PairMlip::set_box(LocalAtoms& atoms) {
  const int periodic = domain->xperiodic + domain->yperiodic + domain->zperiodic;
  if (periodic != 0 && periodic != 3)
    fail("the model has a long-range term (model.long_range), whose sum is for boxes periodic in all three "
         "directions (boundary p p p) or in none (f or s); got a box periodic in " +
         std::to_string(periodic) + " direction(s)");
  // LAMMPS' box: a along x, b in the xy plane; h = (xprd, yprd, zprd, yz, xz, xy).
  const double* h = domain->h;
  const double cell[9] = {h[0], 0, 0, h[5], h[1], 0, h[4], h[3], h[2]};
  std::copy(cell, cell + 9, cell_);
  atoms.cell = cell_;
  atoms.periodic = periodic == 3;
  atoms.ranks = this;
}

void PairMlip::sum(double* values, int64_t n) {
  if (n > 0) MPI_Allreduce(MPI_IN_PLACE, values, int(n), MPI_DOUBLE, MPI_SUM, world);
}

int64_t PairMlip::gather(const double* mine, int64_t n, std::vector<double>& all) {
  const int ranks = comm->nprocs;
  std::vector<int> counts(size_t(ranks), 0), starts(size_t(ranks), 0);
  const int count = int(n);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, world);
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    if (total + counts[size_t(r)] > int64_t(std::numeric_limits<int>::max()))
      fail("the direct long-range sum of a box without periodicity gathers more values than MPI can count");
    starts[size_t(r)] = int(total);
    total += counts[size_t(r)];
  }
  all.assign(size_t(total), 0.0);
  MPI_Allgatherv(mine, count, MPI_DOUBLE, all.data(), counts.data(), starts.data(), MPI_DOUBLE, world);
  return starts[size_t(comm->me)];
}

void PairMlip::write_deviation(LocalAtoms atoms) {
  const int nlocal = atom->nlocal;
  const int64_t nall = atoms.natoms;
  const size_t models = committee_.size() + 1, width = 3 * models;
  deviation_rows_.assign(size_t(nall) * width, 0.0);
  std::vector<double> virials(9 * models);
  auto keep = [&](size_t k, const Results& r) {
    for (int64_t i = 0; i < nall; ++i)
      for (int c = 0; c < 3; ++c) deviation_rows_[size_t(i) * width + 3 * k + c] = r.forces[size_t(i * 3 + c)];
    for (int c = 0; c < 9; ++c) virials[9 * k + size_t(c)] = r.virial[size_t(c)];
  };
  keep(0, results_);
  for (size_t k = 0; k < committee_.size(); ++k) {
    atoms.exchange = committee_exchange_[k] ? this : nullptr;
    try {
      committee_[k]->compute(atoms, false, false, committee_results_);
    } catch (const std::exception& e) {
      error->one(FLERR, "pair_style mlip: step " + std::to_string(update->ntimestep) + ": " + committee_paths_[k] +
                            ": " + e.what());
    }
    keep(k + 1, committee_results_);
  }
  reverse(deviation_rows_.data(), int64_t(width));  // the ghosts' forces onto their owners
  std::vector<int64_t> ids;
  if (atom->tag_enable) {
    ids.resize(size_t(nlocal));
    for (int i = 0; i < nlocal; ++i) ids[size_t(i)] = int64_t(atom->tag[i]);
  }
  deviation_file_->write_step(int64_t(update->ntimestep), int64_t(atom->natoms), nlocal, deviation_rows_.data(), models,
                              ids.empty() ? nullptr : ids.data(), virials.data());
  last_deviation_step_ = int64_t(update->ntimestep);
  ++deviation_steps_;
}

}  // namespace mlip::md
