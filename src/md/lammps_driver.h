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

/// What is wrong with `mlip lammps` arguments that LAMMPS would refuse with its own raw text
/// ("Invalid command-line argument"), in the project's words: an unknown switch, a switch
/// without its values, a word that belongs to no switch. "" when LAMMPS can take them. The
/// switches are those of `lmp` (docs/lammps.md), long and short forms.
std::string lammps_argument_problem(const std::vector<std::string>& args);

/// The input script named by -in / -i, or "" (LAMMPS then reads standard input).
std::string lammps_input_script(const std::vector<std::string>& args);

}  // namespace mlip::md
