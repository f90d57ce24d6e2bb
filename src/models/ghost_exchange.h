// How an MD code moves per-atom values between an atom and its ghost copies, for models that
// exchange features between message-passing layers (docs/lammps.md "Features exchanged between
// ranks"). Header only; no LibTorch, no LAMMPS.
#pragma once

#include <cstdint>

namespace mlip::models {

/// The MD code's communication of per-atom rows over one rank's atoms: the owned atoms are rows
/// [0, nlocal), the ghosts (copies of owned atoms of this or other ranks, periodic images
/// included) rows [nlocal, natoms). Every rank calls forward() and reverse() the same number of
/// times, in the same order, with the same width: they are collective.
class GhostExchange {
 public:
  virtual ~GhostExchange() = default;
  /// rows: [natoms, width] row-major. Sets each ghost row to its atom's owned row (on whichever
  /// rank owns it). Owned rows are read, not changed.
  virtual void forward(double* rows, int64_t width) = 0;
  /// rows: [natoms, width] row-major. Adds each ghost row to its atom's owned row; afterwards
  /// the owned rows hold the sums and the ghost rows are unspecified.
  virtual void reverse(double* rows, int64_t width) = 0;
};

}  // namespace mlip::models
