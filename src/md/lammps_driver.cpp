#include "md/lammps_driver.h"

#include <iostream>

#ifdef MLIP_HAVE_LAMMPS
#include <mpi.h>

#include <cstring>
#include <exception>
#include <typeinfo>

// LAMMPS
#include "force.h"
#include "input.h"
#include "lammps.h"

#include "md/pair_mlip.h"
#endif

namespace mlip::md {

#ifdef MLIP_HAVE_LAMMPS

bool lammps_available() { return true; }

int run_lammps(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"mlip-lammps"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int argc = int(words.size());
  char** argp = argv.data();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(&argc, &argp);
  int code = 0;
  try {
    LAMMPS_NS::LAMMPS lmp(argc, argp, MPI_COMM_WORLD);
    // Debian's LAMMPS has no plugin loader; its style table is public (docs/lammps.md).
    (*lmp.force->pair_map)["mlip"] = &PairMlip::create;
    lmp.input->file();
  } catch (const std::exception& e) {
    // LAMMPS has printed its message. Error::one (one rank) throws an abort exception: the other
    // ranks may be waiting in a collective, so the job is aborted; Error::all ends every rank.
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1 && std::strstr(typeid(e).name(), "Abort") != nullptr) MPI_Abort(MPI_COMM_WORLD, 1);
    code = 1;
  }
  MPI_Finalize();
  return code;
}

#else

bool lammps_available() { return false; }

int run_lammps(const std::vector<std::string>&) {
  std::cerr << "mlip lammps: this mlip was built without LAMMPS (install Debian's liblammps-dev, e.g. with "
               "bash tools/setup.sh, and build again; CMake option MLIP_LAMMPS)\n";
  return 1;
}

#endif

}  // namespace mlip::md
