#pragma once

#include "dist/communicator.h"

namespace mlip::dist {

/// The number of ranks of `comm` that run on this host (this one included), found by comparing
/// host names (a hash of gethostname's, one int64 all-reduce). Collective: every rank calls it.
/// Used where a rank must know what shares its cores: the trainer's `data_workers: auto`
/// (docs/data.md "Worker threads, prefetch and the cache"). The tensor travels on the CPU, so
/// the communicator must reduce host tensors (Gloo, MPI, shared memory, one rank).
int ranks_on_this_host(Communicator& comm);

}  // namespace mlip::dist
