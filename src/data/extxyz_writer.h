// Frames written as extended XYZ, with a model's predictions beside the labels (docs/data.md
// "Predictions as extended XYZ"), for ASE, ovito and MACE's tools to read.
#pragma once

#include <string>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Frame `frame` of `system` as extended XYZ text (count line, comment line, one line per atom;
/// atoms in the system's order, sorted by type): Lattice and pbc (periodic systems), the
/// system's config_type, the frame's labels under the names `keys` gives (energy eV, forces
/// eV/Å, virial eV; those it has), and the predictions under `prefix`_energy (eV),
/// `prefix`_forces ([N, 3] eV/Å), `prefix`_virial ([9] eV) and, with a cell, `prefix`_stress
/// (ASE's convention, -virial / volume, eV/Å³, 9 numbers). forces, virial: row-major; virial may
/// be null. Numbers with 12 significant digits (energies, forces, stresses) or 10 decimals
/// (positions, cells).
std::string extxyz_frame(const System& system, const Frame& frame, const LabelKeys& keys, const std::string& prefix,
                         double energy, const double* forces, const double* virial);

}  // namespace mlip::data
