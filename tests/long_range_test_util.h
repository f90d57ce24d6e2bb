#pragma once
// Checks every model with model.long_range passes through its frozen forward (docs/long_range.md
// "Tests"), shared by test_equivariant_long_range and test_se_e2_a_long_range.
#include <torch/script.h>

#include "data/system.h"
#include "models/model.h"
#include "test_util.h"

namespace mlip::test {

/// A frame of types O and H for the long-range tests: random atoms (at least 0.9 Å apart, 40 %
/// O) in a skewed box of edge 7 Å (periodic) or a cluster, as the frame itself, as a system and
/// its frame (Model::prepare_frame's input), and as the model's SystemAtoms.
struct LongRangeSample {
  Frame frame;
  data::System sys;
  data::Frame data;
  models::SystemAtoms atoms;
};
LongRangeSample long_range_sample(bool periodic, unsigned seed, int natoms = 16);

/// The forward's forces are -dE/dr by central differences (h 1e-5 Å) of its own energy for atoms
/// 0, 5 and 11 (the charges' dependence on positions included), and with a cell its virial is
/// -dE/dε for a strain of positions and cell together; each within 1e-6 of max(1, the largest).
/// The frame must have at least 12 atoms and forces above 1e-3 eV/Å. Float64 models.
void expect_forces_and_virial_are_derivatives(torch::jit::Module& model, const Frame& frame, double rcut);

/// Rotating (and reflecting) and translating the frame, cell and all, leaves the energy and the
/// charges as they were and rotates the forces (1e-9); an input's total_charge of 2 e shifts every
/// charge equally to sum to it, where the plain input's sum to 0. A periodic neutral frame,
/// float64.
void expect_long_range_invariances(torch::jit::Module& model, const Frame& frame, double rcut);

}  // namespace mlip::test
