#pragma once
// How much a committee of models disagrees, and DeePMD-kit's model_devi.out rows: the arithmetic
// shared by `mlip model-devi` (frames from files) and `pair_style mlip` with several models (MD
// steps). docs/active_learning.md "Definitions".

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlip::models {

/// Population mean and standard deviation of values[0, count). The deviation is taken about the
/// first value shifted out, so that models that agree exactly deviate by exactly zero.
void mean_and_deviation(const double* values, size_t count, double& mean, double& deviation);

/// One atom's force deviation, eV/Å: the Euclidean norm of the population standard deviations of
/// its three force components over the models. forces: [models, 3] eV/Å, model k's force on the
/// atom at forces[3 k .. 3 k + 2]. relative (L, eV/Å): divided by |mean force| + L.
double atom_force_deviation(const double* forces, size_t models, std::optional<double> relative);

/// The virial's deviation, eV per atom: of its nine components' deviations the largest, the
/// smallest, and their Euclidean norm / 3.
struct VirialDeviation {
  double max = 0, min = 0, avg = 0;
};

/// virials: [models, 9] eV per atom (each model's virial / N). relative_v (L, eV): every
/// component's deviation divided by |mean virial per atom| (Frobenius norm) + L.
VirialDeviation virial_deviation(const double* virials, size_t models, std::optional<double> relative_v);

/// The column names line of model_devi.out: "#       step         max_devi_v ..." (%12s for the
/// step, %19s for each of max/min/avg_devi_v, max/min/avg_devi_f), then "devi_e" when
/// `with_energy` (`mlip model-devi`; DeePMD-kit's LAMMPS file has no energy column), then
/// "atm_devi_f(N)" when `atomic`; ending in '\n'.
std::string deviation_columns_line(bool with_energy, bool atomic);

/// One row: the step as %12d, then each value of `columns` and of `atoms` as %19.6e; '\n'.
std::string deviation_row(int64_t step, const std::vector<double>& columns, const std::vector<double>& atoms);

}  // namespace mlip::models
