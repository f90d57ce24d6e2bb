#pragma once

#include <memory>
#include <string>
#include <vector>

#include "md/deviation_file.h"
#include "md/potential.h"
#include "pair.h"  // LAMMPS

namespace mlip::md {

/// `pair_style mlip <frozen_model.pt> [more models ...] [device cpu|cuda|cuda:K] [evaluation auto|torchscript]
/// [exchange yes|no] [pairs auto|host|device] [kspace auto|ewald|mesh] [out_freq N] [out_file F] [atomic] [relative L]
/// [relative_v L]`
/// with `pair_coeff * * <name> ...`
/// (docs/lammps.md): a frozen mlip model as a LAMMPS many-body pair style. Each step it gives
/// the model this rank's owned + ghost atoms, adds the energy of the owned atoms and the forces
/// on every atom (LAMMPS returns the ghosts' forces to their owners: `newton on`), the global
/// virial and, when a compute asks, per-atom energies and virials.
///
/// A model that exchanges features between its layers (Potential::exchange_width() > 0) gets
/// ghosts out to r_max only, and its per-layer features cross between ranks through the pair
/// style's forward and reverse communication (docs/lammps.md "Features exchanged between ranks").
///
/// A model with charges (model.long_range) gets its long-range term summed over the ranks: the
/// charges' total and the structure factor (or charge mesh) through MPI_Allreduce, the atoms of a
/// box without periodicity through MPI_Allgatherv; under `atom_style charge` its charges are
/// written into the owned atoms' q every step (docs/lammps.md "Long range across ranks").
///
/// With several models (a committee, docs/lammps.md "A committee of models") the first drives
/// the MD; every out_freq steps all of them evaluate the step and their deviations go to
/// out_file in DeePMD-kit's layout (md/deviation_file.h).
class PairMlip : public LAMMPS_NS::Pair, private GhostExchange, private RankCollectives {
 public:
  explicit PairMlip(LAMMPS_NS::LAMMPS* lmp);
  ~PairMlip() override;
  /// The creator LAMMPS' Force::pair_map holds for the style name "mlip".
  static LAMMPS_NS::Pair* create(LAMMPS_NS::LAMMPS* lmp);

  void compute(int eflag, int vflag) override;
  void settings(int narg, char** arg) override;
  void coeff(int narg, char** arg) override;
  void init_style() override;
  double init_one(int i, int j) override;

  // LAMMPS' communication of the rows handed to forward() / reverse() below.
  int pack_forward_comm(int n, int* list, double* buf, int pbc_flag, int* pbc) override;
  void unpack_forward_comm(int n, int first, double* buf) override;
  int pack_reverse_comm(int n, int first, double* buf) override;
  void unpack_reverse_comm(int n, int* list, double* buf) override;

 private:
  void allocate();
  [[noreturn]] void fail(const std::string& message);
  // GhostExchange: rows [nall, width] through comm->forward_comm_pair / reverse_comm_pair.
  void forward(double* rows, int64_t width) override;
  void reverse(double* rows, int64_t width) override;
  // RankCollectives: MPI_Allreduce and MPI_Allgatherv over `world`.
  void sum(double* values, int64_t n) override;
  int64_t gather(const double* mine, int64_t n, std::vector<double>& all) override;
  /// The box for a model with charges: LAMMPS' lattice vectors as rows and whether it is periodic
  /// (all three directions or none; else an error).
  void set_box(LocalAtoms& atoms);

  /// Reads the model files and the committee's keywords of pair_style (settings()).
  void read_settings(int narg, char** arg, std::vector<std::string>& models, std::string& device,
                     Evaluation& evaluation, PairBuilding& pairs, bool& committee_keywords);
  /// Loads the committee's other models and checks that they agree with the first.
  void load_committee(const std::vector<std::string>& models, const std::string& device, Evaluation evaluation,
                      PairBuilding pairs);
  /// The widest rows this style's forward and reverse communication carry (comm_forward,
  /// comm_reverse): the features of the models that exchange them between ranks, and a
  /// committee's forces; which models exchange (exchange_, committee_exchange_).
  void set_communication_sizes();
  /// On an output step: every other model on `atoms`, the forces folded onto their owners, one
  /// row of the deviation file (collective).
  void write_deviation(LocalAtoms atoms);

  std::unique_ptr<Potential> potential_;
  std::string model_path_;
  /// The committee's other models (evaluated on output steps only), their files and whether each
  /// exchanges features between ranks.
  std::vector<std::unique_ptr<Potential>> committee_;
  std::vector<std::string> committee_paths_;
  std::vector<bool> committee_exchange_;
  DeviationSettings deviation_settings_;
  std::unique_ptr<DeviationFile> deviation_file_;
  Results committee_results_;
  std::vector<double> deviation_rows_;  // [nall, models * 3]: each model's forces on each atom
  int64_t last_deviation_step_ = -1;
  int64_t deviation_steps_ = 0;  // output steps this run
  /// [LAMMPS ntypes + 1]: the model type id of LAMMPS type k (index 0 unused).
  std::vector<int> model_type_of_;
  std::vector<int> types_;    // per step: the model type of each owned and ghost atom
  std::vector<int64_t> ids_;  // per step: their atom ids (LAMMPS tags)
  Results results_;
  bool allow_exchange_ = true;       // `exchange no`: ghosts out to L · r_max instead
  LongRangeSolver solver_ = LongRangeSolver::kAuto;  // `kspace`: a model with charges' periodic sum
  double cell_[9] = {};              // per step: the box's lattice vectors (set_box)
  bool exchange_ = false;            // the model's features cross between ranks per layer
  double* exchange_rows_ = nullptr;  // during forward() / reverse(): the rows, [nall, width]
  int exchange_width_ = 0;
  // The model's counters (Potential::counters(); docs/lammps.md "Counters"): per counter, this
  // rank's count over the run and since its last report, and the step of that report.
  std::vector<models::Counter> counters_;
  std::vector<int64_t> counts_run_, counts_unreported_, last_report_step_;
  /// Adds this step's counts and reports those whose interval has come (collective).
  void count(const std::vector<int64_t>& counts);
  /// The sum over ranks of counter k's counts since its last report, as a warning when not zero.
  void report_interval(size_t k);
};

}  // namespace mlip::md
