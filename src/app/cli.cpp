#include "app/cli.h"

#include <unistd.h>

#include <c10/util/Exception.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include "app/command_paths.h"
#include "app/plot_command.h"
#include "compat/libtorch.h"
#include "data/kokkos_runtime.h"
#include "data/load.h"
#include "data/neighbor_stat.h"
#include "dist/communicator.h"
#include "dist/launch_env.h"
#include "error.h"
#include "md/lammps_driver.h"
#include "archive/model_archive.h"
#include "frozen/compress.h"
#include "frozen/freeze.h"
#include "train/config.h"
#include "train/device.h"
#include "archive/output_file.h"
#include "frozen/tester.h"
#include "train/trainer.h"
#include "version.h"

namespace mlip::app {
namespace {

/// A usage error: printed with the command's usage, exit code 2.
struct UsageError {
  std::string message;
  std::string usage;
};

/// What the command is doing, for a message that has nothing else to name ("out of memory while
/// reading the training input in.yaml").
std::string g_doing;

const char* kMainUsage =
    "usage: mlip [--help] [--version] <command> [<args>]\n"
    "\n"
    "Machine-learned interatomic potentials: train, freeze, test, run MD in LAMMPS.\n"
    "\n"
    "commands:\n"
    "  train           train a model from an input file (YAML, or DeePMD's input.json)\n"
    "  freeze          turn a checkpoint into one self-contained TorchScript file\n"
    "  compress        a faster frozen se_e2_a model for MD: its embedding nets as tables\n"
    "  test            errors of a model (frozen or checkpoint) on labelled systems\n"
    "  neighbor-stat   minimum neighbour distance and maximum neighbour counts of a data set\n"
    "  plot            PNG pictures: the learning curve, parity plots of mlip test's results\n"
    "  lammps          run LAMMPS with pair_style mlip (every argument as lmp takes it: -in in.lammps ...)\n"
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
    "  --energy-key <key>        where the files keep the energy (default energy; docs/data.md)\n"
    "  --forces-key <key>        ... the forces (default forces, DeePMD: force)\n"
    "  --stress-key <key>        ... the stress, eV/Å³, ASE's sign (default stress)\n"
    "  --virial-key <key>        ... the virial, eV (default virial)\n"
    "  -h, --help                show this help\n";

/// --energy-key, --forces-key, --stress-key, --virial-key (docs/data.md "Label keys"): takes the
/// value into `keys` and returns true when `a` is one of them.
bool take_label_key(const std::string& a, const std::vector<std::string>& args, std::size_t& i, data::LabelKeys& keys,
                    const char* usage);

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
  data::LabelKeys keys;
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
    } else if (take_label_key(a, args, i, keys, kNeighborStatUsage)) {
    } else {
      throw UsageError{"neighbor-stat: unknown option '" + a + "'", kNeighborStatUsage};
    }
  }
  if (systems.empty()) throw UsageError{"neighbor-stat: -s <system> is required", kNeighborStatUsage};
  for (const auto& system : systems) check_input_path(system, "the system");
  std::ostringstream radius;
  radius << rcut;
  g_doing = "scanning neighbours within -r " + radius.str() + " Å";

  // Streamed: every frame is scanned, one at a time (docs/data.md).
  auto data = data::load_systems(systems, type_map, "", data::Loading::kStreamed, keys);
  int64_t frames = 0, atoms = 0;
  for (auto& s : data) frames += s.nframes, atoms += s.nframes * s.natoms();
  std::cout << "neighbor-stat: " << data.size() << " system(s), " << frames << " frame(s), "
            << atoms << " atoms, rcut " << rcut << " Å, type_map [";
  for (std::size_t t = 0; t < type_map.size(); ++t) std::cout << (t ? ", " : "") << type_map[t];
  std::cout << "]\n";
  auto stat = data::neighbor_stat(data, int(type_map.size()), rcut, -1, "-r");
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

const char* kTrainUsage =
    "usage: mlip train <input.yaml> [--restart <checkpoint>] [--init-model <checkpoint>] [-o <dir>]\n"
    "\n"
    "Trains the model of the input file (docs/training.md; DeePMD's input.json works unchanged).\n"
    "Writes lcurve.out and the checkpoints <save_ckpt>-<step>.pt (plus the link <save_ckpt>.pt\n"
    "and the pointer file 'checkpoint') into the output folder. Ctrl-C saves a checkpoint and\n"
    "stops (exit code 130); so does SIGTERM (exit code 143; Slurm's time limit, scancel).\n"
    "\n"
    "options:\n"
    "  --restart <ckpt>     continue that run exactly (weights, optimiser, step, sampler)\n"
    "  --init-model <ckpt>  start from those weights (its moving average, when it has one)\n"
    "                       and statistics, at step 0\n"
    "  -o, --output <dir>   folder for lcurve.out and checkpoints (default: .)\n"
    "  --step-times <file>  write the wall time of every step (ms) there, and the part spent making frames\n"
    "  --device <d>         auto, cpu, cuda or cuda:K (default: training.device, else auto:\n"
    "                       CUDA when this build and the machine have it; one GPU per rank)\n"
    "  -h, --help           show this help\n"
    "\n"
    "distributed training (docs/distributed.md; the same command line under torchrun, srun and\n"
    "mpirun; batch_size is per rank):\n"
    "  --distributed <m>    auto (default: when a launcher started several ranks), on, off\n"
    "  --backend <b>        auto (default: mpi under mpirun, nccl when training on CUDA, else\n"
    "                       gloo), gloo, mpi, nccl\n"
    "  --log-mode <m>       master (default: rank 0 prints), collect (every rank prints, lines\n"
    "                       prefixed with the rank), workers (rank r > 0 writes\n"
    "                       <output>/train.rank<r>.log)\n"
    "  --timeout <s>        a rank waiting longer than this for the others fails (default 240)\n"
    "\n"
    "Threads: OMP_NUM_THREADS, or else the CPUs the process may run on (its affinity mask).\n";

const char* kFreezeUsage =
    "usage: mlip freeze [-c <checkpoint>] [-o <model.pt>]\n"
    "\n"
    "Writes the checkpoint's model as one TorchScript file that runs without mlip\n"
    "(torch.jit.load in Python, torch::jit::load in C++), with its metadata (docs/deploy.md).\n"
    "\n"
    "options:\n"
    "  -c, --checkpoint <path>  checkpoint file, or training folder (default: .)\n"
    "  -o, --output <path>      output file (default: frozen_model.pt)\n"
    "  -h, --help               show this help\n";

const char* kTestUsage =
    "usage: mlip test -m <model> -s <system>... [-n <frames>] [-d <prefix>] [--xyz <file>]\n"
    "\n"
    "Energy, force and virial errors (MAE, RMSE, per atom) per system and weighted over the\n"
    "systems, as DeePMD-kit's dp test prints them. Always runs on one process.\n"
    "\n"
    "options:\n"
    "  -m, --model <path>       frozen model, checkpoint, or training folder\n"
    "  -s, --system <path> ...  labelled systems (DeePMD npy folders or extended XYZ)\n"
    "  -n, --numb-test <N>      frames per system (default: all)\n"
    "  -d, --detail <prefix>    write <prefix>.e.out, .e_peratom.out, .f.out (and .v.out)\n"
    "  --xyz <file>             write the frames with the predictions (mlip_energy, mlip_forces,\n"
    "                           mlip_stress) as extended XYZ, for ASE\n"
    "  --energy-key <key>       where the files keep the energy (default energy; docs/data.md)\n"
    "  --forces-key <key>       ... the forces (default forces, DeePMD: force)\n"
    "  --stress-key <key>       ... the stress, eV/Å³, ASE's sign (default stress)\n"
    "  --virial-key <key>       ... the virial, eV (default virial)\n"
    "  -h, --help               show this help\n";

const char* kPlotUsage =
    "usage: mlip plot [-l <lcurve.out or training folder>] [-t <test prefix>] [-o <folder>]\n"
    "\n"
    "Draws PNG files with matplotlib (Python 3; Debian: python3-matplotlib; MLIP_PYTHON picks the\n"
    "interpreter): lcurve.png, the training and validation RMSEs and the learning rate against the\n"
    "step; parity_energy.png and parity_forces.png, predictions against references from the\n"
    "detail files of 'mlip test -d <prefix>', RMSEs in the legends, forces per element.\n"
    "\n"
    "options:\n"
    "  -l, --lcurve <path>      lcurve.out, or the training folder holding it\n"
    "  -t, --test <prefix>      the -d prefix of mlip test's detail files\n"
    "  -o, --output <folder>    where to write the PNG files (default: .)\n"
    "  -h, --help               show this help\n";

const char* kLammpsUsage =
    "usage: mlip lammps [-in <script>] [<LAMMPS option> ...]\n"
    "\n"
    "Runs LAMMPS (the library this mlip was built with) with the pair style 'mlip' added, so that\n"
    "a model written by 'mlip freeze' runs in an input script (docs/lammps.md):\n"
    "  pair_style mlip frozen_model.pt [device cpu|cuda|cuda:K]\n"
    "  pair_coeff * * O H\n"
    "Under mpirun every rank runs it: mpirun -np 4 mlip lammps -in in.lammps\n"
    "\n"
    "options (those of LAMMPS' lmp, long or short form):\n"
    "  -in, -i <script>            input script (default: standard input)\n"
    "  -var, -v <name> <value> ... define a variable\n"
    "  -log, -l <file|none>        log file (default: log.lammps)\n"
    "  -screen, -sc <file|none>    where the screen output goes\n"
    "  -echo, -e <style>           echo the input: none, screen, log or both\n"
    "  -partition, -p <spec> ...   several partitions of the ranks\n"
    "  -plog, -pl / -pscreen, -ps <name>   log and screen files of the partitions\n"
    "  -suffix, -sf / -package, -pk / -kokkos, -k <args>   accelerator packages\n"
    "  -nocite, -nc   -nonbuf, -nb   -skiprun, -sr   -cite, -c <file>   -mpicolor, -m <color>\n"
    "  -reorder, -ro <args>   -restart2data, -r2data <args>   -restart2dump, -r2dump <args>   -mdi <flags>\n"
    "  -help                       LAMMPS' own help (its styles and settings)\n"
    "  -h, --help                  show this help\n";

/// Writes one error line to standard error after flushing standard output, in a single
/// write: under mpirun the ranks' stdout and stderr are forwarded in chunks, and a line
/// written piece by piece (std::cerr is unbuffered) could be split by another stream's text.
void print_error_line(const std::string& line) {
  std::cout.flush();
  archive::write_fully(STDERR_FILENO, line + "\n");  // when it fails, there is nowhere left to say so
}

/// A library's exception in the project's words: the filesystem's operation, path and reason
/// without "filesystem error:"; LibTorch's message without its C++ backtrace.
std::string library_error_text(const std::exception& e) {
  if (const auto* fs_error = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string doing = fs_error->what();
    const std::string prefix = "filesystem error: ";
    if (doing.rfind(prefix, 0) == 0) doing = doing.substr(prefix.size());
    doing = doing.substr(0, doing.find(':'));
    std::string where = fs_error->path1().string();
    if (!fs_error->path2().empty()) where += " -> " + fs_error->path2().string();
    return where + ": " + doing + " (" + fs_error->code().message() + ")";
  }
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e))
    return std::string("LibTorch: ") + torch_error->what_without_backtrace();
  const std::string what = e.what();
  const bool kokkos_allocation = what.find("Kokkos") != std::string::npos && what.find("allocat") != std::string::npos;
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr || kokkos_allocation)
    return "out of memory" + (g_doing.empty() ? std::string() : " while " + g_doing);
  // Kokkos appends a traceback note ("Traceback functionality not available"): not for users.
  std::istringstream lines(what);
  std::string line, kept;
  while (std::getline(lines, line))
    if (line.find("Traceback") == std::string::npos && !line.empty()) kept += (kept.empty() ? "" : "\n") + line;
  return kept.empty() ? "unexpected error in a library" : kept;
}

std::string take_value(const std::vector<std::string>& args, std::size_t& i, const char* usage) {
  if (i + 1 >= args.size() || is_flag(args[i + 1])) throw UsageError{args[i] + ": expected a value", usage};
  return args[++i];
}

bool take_label_key(const std::string& a, const std::vector<std::string>& args, std::size_t& i, data::LabelKeys& keys,
                    const char* usage) {
  std::string* key = a == "--energy-key"   ? &keys.energy
                     : a == "--forces-key" ? &keys.forces
                     : a == "--stress-key" ? &keys.stress
                     : a == "--virial-key" ? &keys.virial
                                           : nullptr;
  if (key == nullptr) return false;
  *key = take_value(args, i, usage);
  if (key->find_first_of(" \t\"=") != std::string::npos)
    throw UsageError{a + ": expected a key name (no spaces, quotes or '='), got '" + *key + "'", usage};
  return true;
}

/// Prefixes every line written to the stream it replaces with "[rank R] " (--log-mode collect).
class PrefixBuf : public std::streambuf {
 public:
  PrefixBuf(std::streambuf* out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

 protected:
  int overflow(int c) override {
    if (c == EOF) return 0;
    if (at_line_start_ && out_->sputn(prefix_.data(), std::streamsize(prefix_.size())) < 0) return EOF;
    at_line_start_ = c == '\n';
    return out_->sputc(char(c));
  }
  int sync() override { return out_->pubsync(); }

 private:
  std::streambuf* out_;
  std::string prefix_;
  bool at_line_start_ = true;
};

/// The launch of this process for `--distributed mode` (auto, on, off).
dist::LaunchEnv launch_for(const std::string& mode) {
  dist::LaunchEnv env = dist::detect_launch([](const char* name) { return std::getenv(name); });
  if (mode == "off") return dist::LaunchEnv{};
  if (mode == "on") {
    if (env.launcher == dist::Launcher::kNone || !env.missing.empty()) {
      std::string missing;
      for (const auto& m : env.missing) missing += (missing.empty() ? "" : ", ") + m;
      throw Error("--distributed on: no launcher environment found (started by torchrun, srun or mpirun?); "
                  "missing: " + missing);
    }
    return env;
  }
  if (env.launcher != dist::Launcher::kNone && env.world_size > 1 && !env.missing.empty() &&
      env.launcher != dist::Launcher::kMpi) {
    std::string missing;
    for (const auto& m : env.missing) missing += (missing.empty() ? "" : ", ") + m;
    throw Error(std::string("started by ") + dist::launcher_name(env.launcher) + " with " +
                std::to_string(env.world_size) + " ranks, but the environment lacks " + missing +
                " (or pass --distributed off to train alone)");
  }
  return env;
}

int train_command(const std::vector<std::string>& args) {
  std::string input;
  train::TrainOptions options;
  std::string distributed = "auto", log_mode = "master";
  dist::CommOptions comm_options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kTrainUsage;
      return kExitOk;
    } else if (a == "--restart") {
      options.restart = take_value(args, i, kTrainUsage);
    } else if (a == "--init-model") {
      options.init_model = take_value(args, i, kTrainUsage);
    } else if (a == "-o" || a == "--output") {
      options.output_dir = take_value(args, i, kTrainUsage);
    } else if (a == "--step-times") {
      options.step_times = take_value(args, i, kTrainUsage);
    } else if (a == "--device") {
      options.device = take_value(args, i, kTrainUsage);
    } else if (a == "--distributed") {
      distributed = take_value(args, i, kTrainUsage);
      if (distributed != "auto" && distributed != "on" && distributed != "off")
        throw UsageError{"--distributed: expected auto, on or off, got '" + distributed + "'", kTrainUsage};
    } else if (a == "--backend") {
      comm_options.backend = take_value(args, i, kTrainUsage);
      if (comm_options.backend != "auto" && comm_options.backend != "gloo" && comm_options.backend != "mpi" &&
          comm_options.backend != "nccl")
        throw UsageError{"--backend: expected auto, gloo, mpi or nccl, got '" + comm_options.backend + "'", kTrainUsage};
    } else if (a == "--log-mode") {
      log_mode = take_value(args, i, kTrainUsage);
      if (log_mode != "master" && log_mode != "collect" && log_mode != "workers")
        throw UsageError{"--log-mode: expected master, collect or workers, got '" + log_mode + "'", kTrainUsage};
    } else if (a == "--timeout") {
      const std::string v = take_value(args, i, kTrainUsage);
      const double t = parse_positive(a, v, kTrainUsage);
      comm_options.timeout = std::chrono::seconds(int64_t(std::ceil(t)));
    } else if (is_flag(a)) {
      throw UsageError{"train: unknown option '" + a + "'", kTrainUsage};
    } else if (input.empty()) {
      input = a;
    } else {
      throw UsageError{"train: expected one input file, got '" + input + "' and '" + a + "'", kTrainUsage};
    }
  }
  if (input.empty()) throw UsageError{"train: an input file is required", kTrainUsage};
  if (!options.restart.empty() && !options.init_model.empty())
    throw UsageError{"train: --restart and --init-model exclude each other", kTrainUsage};
  const dist::LaunchEnv launch = launch_for(distributed);
  check_input_file(input, "the training input");
  if (!options.restart.empty()) check_checkpoint_path(options.restart, "the checkpoint to restart from");
  if (!options.init_model.empty()) check_checkpoint_path(options.init_model, "the checkpoint to start from");
  g_doing = "reading the training input " + input;
  // The input and the device come first: --backend auto picks NCCL for ranks on CUDA devices.
  const train::TrainConfig config = train::load_train_config(input);
  const c10::Device device = options.device.empty()
                                 ? train::resolve_device(config.device, "training.device", launch.local_rank)
                                 : train::resolve_device(options.device, "--device", launch.local_rank);
  options.device = device.str();
  comm_options.cuda = device.is_cuda();
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(launch, comm_options);
  const int rank = comm->rank();
  // Rank-0 I/O (docs/distributed.md): the other ranks' standard output per --log-mode.
  std::ofstream worker_log;
  std::unique_ptr<PrefixBuf> prefix;
  std::streambuf* saved = std::cout.rdbuf();
  if (rank > 0) {
    if (log_mode == "master") {
      std::cout.rdbuf(nullptr);
    } else if (log_mode == "workers") {
      archive::prepare_output_folder(options.output_dir, "-o " + options.output_dir);
      const std::string log = (std::filesystem::path(options.output_dir) / ("train.rank" + std::to_string(rank) + ".log")).string();
      worker_log.open(log);
      if (!worker_log) throw Error(log + ": cannot write this rank's log (" + std::strerror(errno) + ")");
      std::cout.rdbuf(worker_log.rdbuf());
    } else {
      prefix = std::make_unique<PrefixBuf>(saved, "[rank " + std::to_string(rank) + "] ");
      std::cout.rdbuf(prefix.get());
    }
  }
  options.comm = comm.get();
  options.launch = &launch;
  try {
    // Rank 0 writes every file: its paths are checked before any work (docs/robustness.md).
    if (rank == 0) check_training_outputs(config, options);
    g_doing = "training";
    const int code = train::train(config, options);
    std::cout.rdbuf(saved);
    return code;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cout.rdbuf(saved);
    const auto* error = dynamic_cast<const Error*>(&e);
    if (error != nullptr && error->raised_on_every_rank()) {
      if (rank == 0) print_error_line(std::string("mlip: error: ") + e.what());
      return kExitError;
    }
    // Print first (MPI's announcement aborts the job), then tell the other ranks.
    const std::string what = library_error_text(e);
    const bool named = what.rfind("rank ", 0) == 0;
    print_error_line("mlip: error" + (comm->size() > 1 && !named ? " on rank " + std::to_string(rank) : std::string()) +
                     ": " + what);
    comm->announce_failure(what);
    return kExitError;
  }
}

const char* kCompressUsage =
    "usage: mlip compress [-i <model>] [-o <model.pt>] [-s <step>] [-e <factor>] [-f <steps>]\n"
    "                     [-t <input.yaml> | --min-distance <Å>]\n"
    "\n"
    "Writes a compressed frozen se_e2_a model, as DeePMD-kit's dp compress does: each embedding\n"
    "net becomes piecewise fifth-order polynomials of its input on a fine grid over the range the\n"
    "training data covers and a coarser one beyond (docs/se_e2_a.md \"Compression: the embedding\n"
    "nets as tables\"). MD with it is faster; it is still one TorchScript file that runs without\n"
    "mlip. A pair closer than the table reaches is evaluated by the exact net and reported.\n"
    "\n"
    "options:\n"
    "  -i, --input <path>        frozen model, checkpoint, or training folder (default: frozen_model.pt)\n"
    "  -o, --output <path>       output file (default: frozen_model_compressed.pt)\n"
    "  -s, --step <step>         the fine grid's step in the tabulated input (default 0.01)\n"
    "  -e, --extrapolate <e>     the coarse grid (10x the step) reaches e times the data's range (default 5)\n"
    "  -f, --frequency <steps>   in MD, report pairs beyond the tables every this many steps\n"
    "                            (default -1: at the end of the run)\n"
    "  -t, --training-script <input.yaml>\n"
    "                            the training input whose training systems give the shortest pair\n"
    "                            distance (default: the input stored in the model, paths from here)\n"
    "  --min-distance <Å>        the shortest pair distance itself (mlip neighbor-stat: min_nbor_dist)\n"
    "  -h, --help                show this help\n";

int compress_command(const std::vector<std::string>& args) {
  frozen::CompressRequest request;
  request.input = "frozen_model.pt";
  request.output = "frozen_model_compressed.pt";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kCompressUsage;
      return kExitOk;
    } else if (a == "-i" || a == "--input") {
      request.input = take_value(args, i, kCompressUsage);
    } else if (a == "-o" || a == "--output") {
      request.output = take_value(args, i, kCompressUsage);
    } else if (a == "-s" || a == "--step") {
      if (i + 1 >= args.size()) throw UsageError{a + ": expected a value", kCompressUsage};
      request.options.step = parse_positive(a, args[++i], kCompressUsage);
    } else if (a == "-e" || a == "--extrapolate") {
      if (i + 1 >= args.size()) throw UsageError{a + ": expected a value", kCompressUsage};
      const std::string value = args[++i];
      request.options.extrapolate = parse_positive(a, value, kCompressUsage);
      if (request.options.extrapolate < 1)
        throw UsageError{a + ": expected a number of at least 1, got '" + value + "'", kCompressUsage};
    } else if (a == "-f" || a == "--frequency") {
      if (i + 1 >= args.size()) throw UsageError{a + ": expected a value", kCompressUsage};
      const std::string value = args[++i];
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || value.empty())
        throw UsageError{a + ": expected a whole number of steps (-1: at the end of the run), got '" + value + "'",
                         kCompressUsage};
      request.options.check_frequency = v;
    } else if (a == "-t" || a == "--training-script") {
      request.training_input = take_value(args, i, kCompressUsage);
    } else if (a == "--min-distance") {
      if (i + 1 >= args.size()) throw UsageError{a + ": expected a value", kCompressUsage};
      request.options.min_distance = parse_positive(a, args[++i], kCompressUsage);
    } else {
      throw UsageError{"compress: unknown option '" + a + "'", kCompressUsage};
    }
  }
  if (!request.training_input.empty() && request.options.min_distance > 0)
    throw UsageError{"compress: -t and --min-distance: give one of them", kCompressUsage};
  check_checkpoint_path(request.input, "the model");
  if (!request.training_input.empty()) check_input_path(request.training_input, "the training input");
  archive::check_output_target(request.output, archive::SpecialTarget::kRefuse, "compress -o " + request.output,
                               "the compressed model");
  g_doing = "compressing " + request.input;
  frozen::compress(request, std::cout);
  std::cout << "compressed " << request.input << " into " << request.output << "\n";
  return kExitOk;
}

int freeze_command(const std::vector<std::string>& args) {
  std::string checkpoint = ".", output = "frozen_model.pt";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kFreezeUsage;
      return kExitOk;
    } else if (a == "-c" || a == "--checkpoint") {
      checkpoint = take_value(args, i, kFreezeUsage);
    } else if (a == "-o" || a == "--output") {
      output = take_value(args, i, kFreezeUsage);
    } else {
      throw UsageError{"freeze: unknown option '" + a + "'", kFreezeUsage};
    }
  }
  check_checkpoint_path(checkpoint, "the checkpoint");
  archive::check_output_target(output, archive::SpecialTarget::kRefuse, "freeze -o " + output, "the frozen model");
  g_doing = "freezing " + checkpoint;
  frozen::freeze(checkpoint, output);
  std::cout << "froze " << archive::resolve_checkpoint(checkpoint) << " into " << output << "\n";
  return kExitOk;
}

int test_command(const std::vector<std::string>& args) {
  // `mlip test` runs on one rank: under a launcher, the other ranks leave at once.
  if (dist::detect_launch([](const char* name) { return std::getenv(name); }).rank > 0) return kExitOk;
  frozen::TestOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kTestUsage;
      return kExitOk;
    } else if (a == "-m" || a == "--model") {
      options.model = take_value(args, i, kTestUsage);
    } else if (a == "-s" || a == "--system") {
      while (i + 1 < args.size() && !is_flag(args[i + 1])) options.systems.push_back(args[++i]);
      if (options.systems.empty()) throw UsageError{a + ": expected at least one system path", kTestUsage};
    } else if (a == "-n" || a == "--numb-test") {
      const std::string v = take_value(args, i, kTestUsage);
      options.numb_test = int64_t(parse_positive(a, v, kTestUsage));
      if (double(options.numb_test) != std::stod(v))
        throw UsageError{a + ": expected a positive integer, got '" + v + "'", kTestUsage};
    } else if (a == "-d" || a == "--detail") {
      options.detail = take_value(args, i, kTestUsage);
    } else if (a == "--xyz") {
      options.xyz = take_value(args, i, kTestUsage);
    } else if (take_label_key(a, args, i, options.keys, kTestUsage)) {
    } else {
      throw UsageError{"test: unknown option '" + a + "'", kTestUsage};
    }
  }
  if (options.model.empty()) throw UsageError{"test: -m <model> is required", kTestUsage};
  if (options.systems.empty()) throw UsageError{"test: -s <system> is required", kTestUsage};
  check_checkpoint_path(options.model, "the model");
  for (const auto& system : options.systems) check_input_path(system, "the system");
  if (!options.detail.empty()) check_test_detail_outputs(options.detail);
  if (!options.xyz.empty())
    archive::check_output_target(options.xyz, archive::SpecialTarget::kStream, "--xyz " + options.xyz,
                                 "the predictions file");
  g_doing = "testing " + options.model;
  return frozen::run_test(options);
}

int plot_command(const std::vector<std::string>& args) {
  std::vector<std::string> script_args;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kPlotUsage;
      return kExitOk;
    } else if (a == "-l" || a == "--lcurve") {
      script_args.insert(script_args.end(), {"--lcurve", take_value(args, i, kPlotUsage)});
    } else if (a == "-t" || a == "--test") {
      script_args.insert(script_args.end(), {"--test", take_value(args, i, kPlotUsage)});
    } else if (a == "-o" || a == "--output") {
      script_args.insert(script_args.end(), {"--output", take_value(args, i, kPlotUsage)});
    } else {
      throw UsageError{"plot: unknown option '" + a + "'", kPlotUsage};
    }
  }
  if (script_args.empty()) throw UsageError{"plot: nothing to draw: give -l and/or -t", kPlotUsage};
  g_doing = "drawing pictures";
  return run_plot_script(script_args);
}

int lammps_command(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "-h" || a == "--help") {
      std::cout << kLammpsUsage;
      // Without LAMMPS the help still comes, then the build's message and exit 1: scripts test
      // `mlip lammps -h` to learn whether this mlip has LAMMPS (tests/lammps/make_models.sh).
      if (!md::lammps_available()) return md::run_lammps({});
      return kExitOk;
    }
  const std::string problem = md::lammps_argument_problem(args);
  if (!problem.empty()) throw UsageError{problem, kLammpsUsage};
  const std::string script = md::lammps_input_script(args);
  if (!script.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(script, ec))
      throw Error(script + ": cannot read the LAMMPS input script (" + std::strerror(ENOENT) + ")");
    check_input_file(script, "the LAMMPS input script");
  }
  g_doing = "running LAMMPS";
  return md::run_lammps(args);
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
      std::cout << "mlip " << MLIP_VERSION << " (LibTorch " << compat::libtorch_version()
                << (train::build_has_cuda() ? " with CUDA" : "") << ", Kokkos " << data::kokkos_execution_space_name()
                << ")\n";
      return kExitOk;
    }
    if (cmd == "neighbor-stat") return neighbor_stat_command(rest);
    if (cmd == "train") return train_command(rest);
    if (cmd == "freeze") return freeze_command(rest);
    if (cmd == "compress") return compress_command(rest);
    if (cmd == "test") return test_command(rest);
    if (cmd == "lammps") return lammps_command(rest);
    if (cmd == "plot") return plot_command(rest);
    if (!cmd.empty() && cmd[0] == '-') throw UsageError{"unknown option '" + cmd + "'", kMainUsage};
    throw UsageError{"unknown command '" + cmd + "'", kMainUsage};
  } catch (const UsageError& e) {
    std::cerr << "mlip: " << e.message << "\n\n" << e.usage;
    return kExitUsage;
  } catch (const Error& e) {
    print_error_line(std::string("mlip: error: ") + e.what());
    return kExitError;
  } catch (const std::exception& e) {
    // A library's exception that no boundary caught: still a clean message and exit code.
    print_error_line("mlip: error: " + library_error_text(e));
    return kExitError;
  } catch (...) {
    print_error_line("mlip: error: unexpected error" + (g_doing.empty() ? std::string() : " while " + g_doing));
    return kExitError;
  }
}

}  // namespace mlip::app
