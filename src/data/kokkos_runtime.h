#pragma once

namespace mlip::data {

/// Initialises Kokkos once per process (no-op when already initialised, e.g. by a host program)
/// and registers its finalisation at exit. Every function of mlip that launches Kokkos kernels
/// calls it, so callers need not care.
void ensure_kokkos_initialized();

/// The name of Kokkos' default execution space ("Serial", "OpenMP", "Cuda", ...).
const char* kokkos_execution_space_name();

}  // namespace mlip::data
