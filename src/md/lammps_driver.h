#pragma once

#include <string>
#include <vector>

namespace mlip::md {

/// `mlip lammps <lmp arguments>`: runs LAMMPS (Debian's library, MPI_COMM_WORLD) with
/// `pair_style mlip` added to its styles, taking the arguments `lmp` takes (-in, -var, -log,
/// -screen, -echo, ...). Returns the exit code: 0, or 1 after a LAMMPS or mlip error (whose
/// message LAMMPS has printed). Without LAMMPS in the build: a message and 1.
int run_lammps(const std::vector<std::string>& args);

/// Whether this build has LAMMPS.
bool lammps_available();

}  // namespace mlip::md
