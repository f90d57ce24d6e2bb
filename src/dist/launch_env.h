#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mlip::dist {

/// Which launcher started this process (docs/distributed.md "How a rank finds the others").
enum class Launcher { kNone, kTorchrun, kSlurm, kMpi };

/// Name for messages: "none", "torchrun", "srun", "mpirun".
const char* launcher_name(Launcher launcher);

/// Rank layout found in the environment. world_size 1 and launcher kNone mean plain
/// single-process training.
struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  /// Rendezvous host and port for c10d's TCPStore ("" / 0 when not known).
  std::string master_addr;
  int master_port = 0;
  /// Slurm node list as given (e.g. "node[01-04]"), else "".
  std::string node_list;
  /// Variables a distributed run would need but are absent (for `--distributed on` errors).
  std::vector<std::string> missing;
};

/// Reads the launcher variables through `getenv` (injectable for tests; nullptr = unset):
/// torchrun: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Slurm: SLURM_PROCID,
/// SLURM_LOCALID, SLURM_NTASKS, SLURM_JOB_NODELIST / SLURM_NODELIST, SLURM_JOB_ID (address =
/// first host of the node list, port = 15000 + job id mod 20000, unless MASTER_* are set);
/// OpenMPI: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK, or PMI_RANK / PMI_SIZE.
/// torchrun takes precedence over Slurm (torchrun inside an allocation), Slurm over MPI.
/// Throws mlip::Error for a variable that is present but not a valid integer.
LaunchEnv detect_launch(const std::function<const char*(const char*)>& getenv);

/// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& node_list);

}  // namespace mlip::dist
