#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pair.h"  // LAMMPS

#include "md/potential.h"

namespace mlip::md {

/// `pair_style mlip <frozen_model.pt> [device cpu|cuda|cuda:K] [evaluation auto|torchscript]` with `pair_coeff * * <name> ...`
/// (docs/lammps.md): a frozen mlip model as a LAMMPS many-body pair style. Each step it gives
/// the model this rank's owned + ghost atoms, adds the energy of the owned atoms and the forces
/// on every atom (LAMMPS returns the ghosts' forces to their owners: `newton on`), the global
/// virial and, when a compute asks, per-atom energies and virials.
class PairMlip : public LAMMPS_NS::Pair {
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

 private:
  void allocate();
  [[noreturn]] void fail(const std::string& message);

  std::unique_ptr<Potential> potential_;
  std::string model_path_;
  /// [LAMMPS ntypes + 1]: the model type id of LAMMPS type k (index 0 unused).
  std::vector<int> model_type_of_;
  std::vector<int> types_;     // per step: the model type of each owned and ghost atom
  std::vector<int64_t> ids_;   // per step: their atom ids (LAMMPS tags)
  Results results_;
};

}  // namespace mlip::md
