#pragma once
// The model deviation file of `pair_style mlip` with several models (docs/lammps.md "A committee
// of models"): DeePMD-kit's LAMMPS model_devi.out, written by rank 0 from every rank's atoms.

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace mlip::md {

/// What the committee writes (pair_style mlip's keywords after the model files).
struct DeviationSettings {
  int64_t out_freq = 100;                   ///< `out_freq`: a row every out_freq steps (step 0 included)
  std::string out_file = "model_devi.out";  ///< `out_file`
  bool atomic = false;                      ///< `atomic`: one atm_devi_f column per atom, in id order
  std::optional<double> relative;           ///< `relative L` (eV/Å): force deviations / (|mean force| + L)
  std::optional<double> relative_v;         ///< `relative_v L` (eV): virial deviations / (|mean virial| / N + L)
};

/// Rank 0's open model_devi.out; every rank calls write_step() at the same steps (collective).
class DeviationFile {
 public:
  /// Collective: rank 0 replaces settings.out_file with the column names line. Throws
  /// mlip::Error on every rank when rank 0 cannot write it.
  DeviationFile(const DeviationSettings& settings, MPI_Comm world);
  ~DeviationFile();
  DeviationFile(const DeviationFile&) = delete;
  DeviationFile& operator=(const DeviationFile&) = delete;

  /// Collective: one row for `step`. This rank's owned atoms' forces with the ghosts' forces
  /// already folded onto their owners: forces [nlocal, models, 3] eV/Å; ids [nlocal] their global
  /// ids (needed with `atomic`, else may be null); virials [models, 9] eV, the sum of this rank's
  /// share of each model's virial; natoms the atoms over all ranks.
  void write_step(int64_t step, int64_t natoms, int64_t nlocal, const double* forces, size_t models, const int64_t* ids,
                  const double* virials);

 private:
  DeviationSettings settings_;
  MPI_Comm world_;
  int rank_ = 0;
  std::FILE* file_ = nullptr;  // rank 0's
};

}  // namespace mlip::md
