// How MD computes a long-range model's periodic sum (docs/lammps.md "Long range across ranks").
// Header only.
#pragma once

namespace mlip::md {

/// The periodic long-range sum's method in MD.
enum class LongRangeSolver {
  kAuto,   ///< the k-vector sum while atoms × k-vectors stay below kMeshAbove, else the mesh; chosen at
           ///< the first step and kept for the run
  kEwald,  ///< the k-vector sum (models/long_range/ewald.h): the frozen model's own numbers
  kMesh,   ///< the particle mesh (models/long_range/mesh_ewald.h): cost ∝ atoms
};

/// kAuto's threshold on atoms × k-vectors (the k-vector sum's work per step).
constexpr double kMeshAbove = 2e7;

}  // namespace mlip::md
