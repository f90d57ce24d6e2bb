#include "app/cli.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "data/load.h"
#include "data/neighbor_stat.h"
#include "error.h"
#include "version.h"

namespace mlip::app {
namespace {

/// A usage error: printed with the command's usage, exit code 2.
struct UsageError {
  std::string message;
  std::string usage;
};

const char* kMainUsage =
    "usage: mlip [--help] [--version] <command> [<args>]\n"
    "\n"
    "Machine-learned interatomic potentials: train, freeze, test.\n"
    "\n"
    "commands:\n"
    "  neighbor-stat   minimum neighbour distance and maximum neighbour counts of a data set\n"
    "\n"
    "Run 'mlip <command> --help' for the options of a command.\n";

const char* kNeighborStatUsage =
    "usage: mlip neighbor-stat -s <system> [<system> ...] -r <rcut> [-t <type> ...]\n"
    "\n"
    "Scans every frame of the systems (DeePMD npy folders, folders holding them, or extended\n"
    "XYZ files) and prints the minimum neighbour distance and, for each type, the maximum\n"
    "number of neighbours of that type within rcut (what se_e2_a's sel must cover).\n"
    "\n"
    "options:\n"
    "  -s, --system <path> ...   systems to scan (at least one)\n"
    "  -r, --rcut <Å>            cutoff radius (default 6.0)\n"
    "  -t, --type-map <name> ... type names; default: the data's type_map.raw\n"
    "  -h, --help                show this help\n";

bool is_flag(const std::string& a) { return a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1])) && a[1] != '.'; }

double parse_positive(const std::string& flag, const std::string& value, const std::string& usage) {
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || !(v > 0.0) || !std::isfinite(v))
    throw UsageError{flag + ": expected a positive number, got '" + value + "'", usage};
  return v;
}

int neighbor_stat_command(const std::vector<std::string>& args) {
  std::vector<std::string> systems, type_map;
  double rcut = 6.0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kNeighborStatUsage;
      return kExitOk;
    } else if (a == "-s" || a == "--system") {
      while (i + 1 < args.size() && !is_flag(args[i + 1])) systems.push_back(args[++i]);
      if (systems.empty()) throw UsageError{a + ": expected at least one system path", kNeighborStatUsage};
    } else if (a == "-t" || a == "--type-map") {
      while (i + 1 < args.size() && !is_flag(args[i + 1])) type_map.push_back(args[++i]);
      if (type_map.empty()) throw UsageError{a + ": expected at least one type name", kNeighborStatUsage};
    } else if (a == "-r" || a == "--rcut") {
      if (i + 1 >= args.size()) throw UsageError{a + ": expected a value", kNeighborStatUsage};
      rcut = parse_positive(a, args[++i], kNeighborStatUsage);
    } else {
      throw UsageError{"neighbor-stat: unknown option '" + a + "'", kNeighborStatUsage};
    }
  }
  if (systems.empty()) throw UsageError{"neighbor-stat: -s <system> is required", kNeighborStatUsage};

  auto data = data::load_systems(systems, type_map);
  int64_t frames = 0, atoms = 0;
  for (auto& s : data) frames += s.nframes, atoms += s.nframes * s.natoms();
  std::cout << "neighbor-stat: " << data.size() << " system(s), " << frames << " frame(s), "
            << atoms << " atoms, rcut " << rcut << " Å, type_map [";
  for (std::size_t t = 0; t < type_map.size(); ++t) std::cout << (t ? ", " : "") << type_map[t];
  std::cout << "]\n";
  auto stat = data::neighbor_stat(data, int(type_map.size()), rcut);
  std::cout << std::setprecision(6) << std::fixed;
  if (std::isfinite(stat.min_distance))
    std::cout << "min_nbor_dist: " << stat.min_distance << "   (" << stat.min_where << ")\n";
  else
    std::cout << "min_nbor_dist: none within rcut\n";
  std::cout << "max_nbor_size: [";
  for (std::size_t t = 0; t < stat.max_neighbors.size(); ++t)
    std::cout << (t ? ", " : "") << stat.max_neighbors[t];
  std::cout << "]\n";
  for (std::size_t t = 0; t < stat.max_neighbors.size(); ++t)
    std::cout << "  " << std::left << std::setw(8) << type_map[t] << " max neighbours " << stat.max_neighbors[t]
              << "  (sel: auto -> " << 4 * ((stat.max_neighbors[t] + 3) / 4) << ")\n";
  return kExitOk;
}

}  // namespace

int run_cli(const std::vector<std::string>& args) {
  try {
    if (args.empty()) throw UsageError{"no command given", kMainUsage};
    const std::string& cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << kMainUsage;
      return kExitOk;
    }
    if (cmd == "-V" || cmd == "--version") {
      std::cout << "mlip " << MLIP_VERSION << " (Kokkos " << data::kokkos_execution_space_name() << ")\n";
      return kExitOk;
    }
    if (cmd == "neighbor-stat") return neighbor_stat_command(rest);
    if (!cmd.empty() && cmd[0] == '-') throw UsageError{"unknown option '" + cmd + "'", kMainUsage};
    throw UsageError{"unknown command '" + cmd + "'", kMainUsage};
  } catch (const UsageError& e) {
    std::cerr << "mlip: " << e.message << "\n\n" << e.usage;
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "mlip: error: " << e.what() << "\n";
    return kExitError;
  } catch (const std::exception& e) {
    // LibTorch, yaml-cpp or the standard library: still a clean message and exit code.
    std::cerr << "mlip: error: " << e.what() << "\n";
    return kExitError;
  }
}

}  // namespace mlip::app
