#pragma once

#include <mutex>

namespace mlip::data {

/// Initialises Kokkos once per process (no-op when already initialised, e.g. by a host program)
/// and registers its finalisation at exit. Every function of mlip that launches Kokkos kernels
/// calls it, so callers need not care.
void ensure_kokkos_initialized();

/// Held by code that launches Kokkos kernels (and reads their Views) from more than one thread,
/// such as a model's prepare_frame on the trainer's worker threads: Kokkos' Serial space (Debian's
/// Kokkos 3.4) shares its reduction scratch between threads (docs/data.md "Worker threads").
std::mutex& kokkos_mutex();

/// The name of Kokkos' default execution space ("Serial", "OpenMP", "Cuda", ...).
const char* kokkos_execution_space_name();

}  // namespace mlip::data
