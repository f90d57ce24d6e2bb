#pragma once
// Helpers of the md::Potential tests (test_potential, test_potential_cuda): small frozen models
// written as `mlip freeze` would, and an MD rank's view of a periodic frame.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "md/potential.h"
#include "test_util.h"

namespace mlip::test {

/// Writes a frozen model of `model_yaml` (the `model:` section) with fixed statistics (se_e2_a's
/// davg, dstd and bias; the equivariant model's scale and shift), types O and H, as `mlip freeze`
/// would, and returns its r_max in Å. poisoned: its first parameter holds NaN.
double write_frozen(const std::string& path, const std::string& model_yaml, bool poisoned = false);

/// A small se_e2_a `model:` section (sel [12, 24], rcut 3.5 Å) in `precision` (float32, float64).
std::string se_yaml(const std::string& precision);
/// A small equivariant `model:` section (r_max 3 Å, 4 features, l_max 1, 2 layers).
std::string equivariant_yaml(const std::string& precision);

/// An MD rank's atoms (md::LocalAtoms): the owned atoms first, then the ghosts.
struct RankAtoms {
  std::vector<double> pos;     ///< [natoms * 3] Å, every position imaged
  std::vector<int> types;      ///< [natoms] type ids
  std::vector<int64_t> owner;  ///< [natoms] the atom of the frame that row k images
  int64_t nlocal = 0;          ///< owned atoms: rows [0, nlocal)
};

/// The atoms `owned` (indices into f) first, then every other atom of f and, with `images`,
/// every periodic image of f's atoms (shifts in [-1, 1]^3) as ghosts.
RankAtoms rank_atoms(const Frame& f, const std::vector<int64_t>& owned, bool images = true);

/// Rows of `width` values summed onto the atoms of the frame they image (`owner`): a ghost's
/// force and virial belong to its owner, and two evaluation paths may leave them on different rows.
std::vector<double> fold(const std::vector<double>& rows, const std::vector<int64_t>& owner, int64_t natoms, int width);

/// md::Potential of the frozen model at `model_path` on two "ranks" owning the two halves of a
/// periodic 40-atom frame (9.5 Å, pairs no closer than 0.9 Å), summed, against the frozen forward
/// on the whole frame: energy, per-atom energies, forces, virial and per-atom virials to `tol`
/// relative. ids: pass the atoms' ids (ghosts that image an atom already present are folded
/// onto it).
void check_against_forward(const std::string& model_path, double r_max, md::Evaluation evaluation, double tol,
                           bool ids);

/// Largest |a - b| over the values, and the largest |b| (the scale a tolerance is relative to);
/// a size mismatch is a test failure.
std::pair<double, double> max_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mlip::test
