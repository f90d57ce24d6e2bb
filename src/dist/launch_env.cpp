#include "dist/launch_env.h"

#include <cstdlib>

#include "error.h"

namespace mlip::dist {
namespace {

bool parse_int(const char* text, int& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000000L) return false;
  out = int(v);
  return true;
}

/// Reads an integer variable: absent -> false; present but malformed -> mlip::Error.
bool read_int(const std::function<const char*(const char*)>& getenv, const char* name, int& out) {
  const char* v = getenv(name);
  if (!v) return false;
  if (!parse_int(v, out))
    throw Error(std::string("environment variable ") + name +
                ": expected a non-negative integer, got '" + v + "'");
  return true;
}

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kSlurm: return "srun";
    case Launcher::kMpi: return "mpirun";
    default: return "none";
  }
}

std::string first_slurm_host(const std::string& node_list) {
  // Take the first comma-separated item outside brackets.
  std::string item;
  int depth = 0;
  for (char c : node_list) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    item.push_back(c);
  }
  auto open = item.find('[');
  if (open == std::string::npos) return item;
  std::string prefix = item.substr(0, open);
  std::string range = item.substr(open + 1);
  std::string first;
  for (char c : range) {
    if (c == ',' || c == '-' || c == ']') break;
    first.push_back(c);
  }
  return prefix + first;
}

LaunchEnv detect_launch(const std::function<const char*(const char*)>& getenv) {
  LaunchEnv env;
  int rank = 0, size = 0, local = 0;
  int port = 0;
  const char* addr = getenv("MASTER_ADDR");
  bool have_port = read_int(getenv, "MASTER_PORT", port);

  if (getenv("TORCHELASTIC_RUN_ID") || (getenv("RANK") && getenv("WORLD_SIZE"))) {
    env.launcher = Launcher::kTorchrun;
    if (!read_int(getenv, "RANK", rank)) env.missing.push_back("RANK");
    if (!read_int(getenv, "WORLD_SIZE", size)) env.missing.push_back("WORLD_SIZE");
    if (!read_int(getenv, "LOCAL_RANK", local)) local = rank;
    if (!addr) env.missing.push_back("MASTER_ADDR");
    if (!have_port) env.missing.push_back("MASTER_PORT");
  } else if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) {
    env.launcher = Launcher::kSlurm;
    read_int(getenv, "SLURM_PROCID", rank);
    read_int(getenv, "SLURM_NTASKS", size);
    if (!read_int(getenv, "SLURM_LOCALID", local)) local = 0;
    const char* nodes = getenv("SLURM_JOB_NODELIST");
    if (!nodes) nodes = getenv("SLURM_NODELIST");
    if (nodes) env.node_list = nodes;
    if (!addr && nodes) env.master_addr = first_slurm_host(nodes);
    if (!have_port) {
      int job = 0;
      if (read_int(getenv, "SLURM_JOB_ID", job) || read_int(getenv, "SLURM_JOBID", job)) {
        port = 15000 + job % 20000;
        have_port = true;
      } else {
        env.missing.push_back("MASTER_PORT (or SLURM_JOB_ID)");
      }
    }
    if (!addr && !nodes) env.missing.push_back("MASTER_ADDR (or SLURM_JOB_NODELIST)");
  } else if (getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK")) {
    env.launcher = Launcher::kMpi;
    if (!read_int(getenv, "OMPI_COMM_WORLD_RANK", rank)) read_int(getenv, "PMI_RANK", rank);
    if (!read_int(getenv, "OMPI_COMM_WORLD_SIZE", size)) read_int(getenv, "PMI_SIZE", size);
    if (!read_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", local)) local = rank;
    if (size == 0) env.missing.push_back("OMPI_COMM_WORLD_SIZE (or PMI_SIZE)");
  } else {
    env.missing = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    return env;
  }
  env.rank = rank;
  env.local_rank = local;
  env.world_size = size > 0 ? size : 1;
  if (addr) env.master_addr = addr;
  if (have_port) env.master_port = port;
  if (env.rank >= env.world_size)
    throw Error(std::string(launcher_name(env.launcher)) + ": rank " + std::to_string(env.rank) +
                " is not below the world size " + std::to_string(env.world_size));
  return env;
}

}  // namespace mlip::dist
