#include "app/cli.h"

#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
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
#include <map>
#include <sstream>

#include "app/command_line.h"
#include "app/command_paths.h"
#include "app/committee.h"
#include "app/plot_command.h"
#include "compat/blas_kernels.h"
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
#include "frozen/change_bias.h"
#include "frozen/freeze.h"
#include "train/config.h"
#include "train/device.h"
#include "archive/output_file.h"
#include "archive/run_lock.h"
#include "frozen/model_deviation.h"
#include "frozen/tester.h"
#include "train/trainer.h"
#include "version.h"

namespace mlip::app {
namespace {

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
    "  change-bias     a model's per-element energy shifts re-fitted to labelled frames, or set\n"
    "  test            errors of a model (frozen or checkpoint) on labelled systems\n"
    "  model-devi      how much a committee of models disagrees on each frame (DeePMD-kit's model_devi.out)\n"
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
    "  --charges-key <key>       ... the per-atom charges, e (default REF_charges or charges;\n"
    "                            DeePMD: charge)\n"
    "  -h, --help                show this help\n";

/// --energy-key, --forces-key, --stress-key, --virial-key, --charges-key (docs/data.md "Label keys"): where the
/// files keep each label, into `keys`.
void add_label_key_options(CommandLine& line, data::LabelKeys& keys) {
  const auto key_name = [](const std::string& key) {
    return key.find_first_of(" \t\"=") == std::string::npos
               ? std::string()
               : "expected a key name (no spaces, quotes or '='), got '" + key + "'";
  };
  line.add_value("--energy-key", keys.energy, key_name);
  line.add_value("--forces-key", keys.forces, key_name);
  line.add_value("--stress-key", keys.stress, key_name);
  line.add_value("--virial-key", keys.virial, key_name);
  line.add_value("--charges-key", keys.charges, key_name);
}

/// A value check (CommandLine::ValueCheck): "" when `value` is one of `choices`, else
/// "expected <in_words>, got '<value>'".
CommandLine::ValueCheck one_of(std::vector<std::string> choices, std::string in_words) {
  return [choices = std::move(choices), in_words = std::move(in_words)](const std::string& value) {
    if (std::find(choices.begin(), choices.end(), value) != choices.end()) return std::string();
    return "expected " + in_words + ", got '" + value + "'";
  };
}

/// neighbor-stat's options (kNeighborStatUsage).
struct NeighborStatArguments {
  std::vector<std::string> systems;   ///< -s
  std::vector<std::string> type_map;  ///< -t; empty: the data's type_map.raw
  data::LabelKeys keys;
  double rcut = 6.0;  ///< -r, Å
};

/// Reads neighbor-stat's arguments into `out`; false when --help printed the usage.
bool read_neighbor_stat_arguments(const std::vector<std::string>& args, NeighborStatArguments& out) {
  CommandLine line("neighbor-stat", kNeighborStatUsage);
  line.add_list("-s,--system", out.systems, "expected at least one system path");
  line.add_list("-t,--type-map", out.type_map, "expected at least one type name");
  line.add_parsed("-r,--rcut", out.rcut, positive_number_problem, CommandLine::ValueArgument::kAny);
  add_label_key_options(line, out.keys);
  if (!line.read(args)) return false;
  if (out.systems.empty()) throw line.error("neighbor-stat: -s <system> is required");
  return true;
}

int neighbor_stat_command(const std::vector<std::string>& args) {
  NeighborStatArguments arguments;
  if (!read_neighbor_stat_arguments(args, arguments)) return kExitOk;
  const std::vector<std::string>& systems = arguments.systems;
  std::vector<std::string>& type_map = arguments.type_map;
  const double rcut = arguments.rcut;
  for (const auto& system : systems) check_input_path(system, "the system");
  std::ostringstream radius;
  radius << rcut;
  g_doing = "scanning neighbours within -r " + radius.str() + " Å";

  // Streamed: every frame is scanned, one at a time (docs/data.md).
  auto data = data::load_systems(systems, type_map, "", data::Loading::kStreamed, arguments.keys);
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
    "usage: mlip train <input.yaml> [--restart <ckpt> | --init-model <ckpt> | --finetune <model>] [-o <dir>]\n"
    "                  [--committee <N> [--member <k>] [--committee-jobs <J>]]\n"
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
    "  --finetune <model>   start from a trained model (frozen or checkpoint) of the same\n"
    "                       architecture: the weights of the elements both know, new elements\n"
    "                       as a fresh model's, energy shifts fitted to the new data, at step 0\n"
    "                       (docs/training.md \"Fine-tuning\")\n"
    "  -o, --output <dir>   folder for lcurve.out and checkpoints (default: .)\n"
    "  --step-times <file>  write the wall time of every step (ms) there, and the part spent making frames\n"
    "  --count-ops          with --step-times: also each step's LibTorch operator calls, autograd\n"
    "                       nodes and device reads (what a GPU step asks of the host; counting\n"
    "                       slows the step a little)\n"
    "  --device <d>         auto, cpu, cuda or cuda:K (default: training.device, else auto:\n"
    "                       CUDA when this build and the machine have it; one GPU per rank)\n"
    "  -h, --help           show this help\n"
    "\n"
    "a committee of models for active learning (docs/training.md \"A committee of models\"):\n"
    "  --committee <N>      train N models that differ only in their seeds (member k adds k to\n"
    "                       every seed; member 0 is the plain run) into <dir>/model_0 ... model_<N-1>,\n"
    "                       each an ordinary training folder with its log train.log; --restart and\n"
    "                       --init-model <path> give member k <path>/model_k where it exists, else <path>\n"
    "  --member <k>         train member k (0 <= k < N) alone, in this process (a Slurm array task;\n"
    "                       distributed launches as for a plain run)\n"
    "  --committee-jobs <J> members trained at a time (default: N or the usable cores, the fewer),\n"
    "                       each with max(1, cores / J) threads; 1: one after another with all cores\n"
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
    "  --charges-key <key>      ... the per-atom charges, e (default REF_charges or charges;\n"
    "                           DeePMD: charge)\n"
    "  -h, --help               show this help\n";

const char* kModelDeviUsage =
    "usage: mlip model-devi -m <model> <model>... -s <system>... [-o <file>] [-f <steps>] [--atomic]\n"
    "                       [--relative <L>] [--relative_v <L>] [--select <LO> <HI> [--candidates <file>]]\n"
    "\n"
    "The deviation of two or more models' predictions on every frame of the systems, in\n"
    "DeePMD-kit's model_devi.out layout (docs/active_learning.md): per system a header, then per\n"
    "frame the step, max/min/avg_devi_v, max/min/avg_devi_f and devi_e. Labels are not needed.\n"
    "\n"
    "options:\n"
    "  -m, --models <path> ...  frozen models, checkpoints or training folders (two or more, one type map)\n"
    "  -s, --system <path> ...  systems (DeePMD npy folders, extended XYZ, HDF5, LAMMPS dumps with an\n"
    "                           element column: *.dump, *.lammpstrj, dump.*)\n"
    "  -o, --output <file>      the deviation file (default model_devi.out; replaced when complete)\n"
    "  -f, --frequency <N>      steps between two frames: frame k is step k * N (default 1)\n"
    "  --atomic                 one atm_devi_f column per atom after devi_e\n"
    "  --relative <L>           each atom's force deviation / (|its mean force| + L), L in eV/Å\n"
    "  --relative_v <L>         the virial's deviations / (|the mean virial per atom| + L), L in eV\n"
    "  --select <LO> <HI>       write the frames with LO <= max_devi_f < HI (eV/Å) as extended XYZ\n"
    "  --candidates <file>      ... to this file (default candidates.extxyz)\n"
    "  --energy-key <key>       where the files keep the energy (default energy; docs/data.md)\n"
    "  --forces-key <key>       ... the forces (default forces, DeePMD: force)\n"
    "  --stress-key <key>       ... the stress, eV/Å³, ASE's sign (default stress)\n"
    "  --virial-key <key>       ... the virial, eV (default virial)\n"
    "  --charges-key <key>      ... the per-atom charges, e (default REF_charges or charges;\n"
    "                           DeePMD: charge)\n"
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

/// Where this rank's standard output goes under --log-mode (docs/distributed.md): rank 0 keeps
/// it; another rank drops it (master), prefixes its lines with "[rank r] " (collect) or writes
/// <output>/train.rank<r>.log (workers). restore() (or the destructor) gives std::cout back.
class RankOutput {
 public:
  RankOutput(int rank, const std::string& log_mode, const std::string& output_dir) : saved_(std::cout.rdbuf()) {
    if (rank == 0) return;
    if (log_mode == "master") {
      std::cout.rdbuf(nullptr);
    } else if (log_mode == "workers") {
      archive::prepare_output_folder(output_dir, "-o " + output_dir);
      const std::string log = (std::filesystem::path(output_dir) / ("train.rank" + std::to_string(rank) + ".log")).string();
      worker_log_.open(log);
      if (!worker_log_) throw Error(log + ": cannot write this rank's log (" + std::strerror(errno) + ")");
      std::cout.rdbuf(worker_log_.rdbuf());
    } else {
      prefix_ = std::make_unique<PrefixBuf>(saved_, "[rank " + std::to_string(rank) + "] ");
      std::cout.rdbuf(prefix_.get());
    }
  }
  ~RankOutput() { restore(); }
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  /// Standard output as it was before.
  void restore() { std::cout.rdbuf(saved_); }

 private:
  std::streambuf* saved_;
  std::ofstream worker_log_;
  std::unique_ptr<PrefixBuf> prefix_;
};

/// train's options (kTrainUsage): the input file, those of train::train, the launch and the
/// collectives.
struct TrainArguments {
  std::string input;
  train::TrainOptions options;
  std::string distributed = "auto";  ///< --distributed: auto, on, off
  std::string log_mode = "master";   ///< --log-mode: master, collect, workers
  dist::CommOptions comm_options;    ///< --backend, --timeout
  CommitteeRequest committee;        ///< --committee, --member, --committee-jobs
};

/// --timeout's value: a positive number of seconds, rounded up to whole seconds.
std::string parse_timeout(const std::string& value, std::chrono::seconds& timeout) {
  double seconds = 0.0;
  const std::string problem = positive_number_problem(value, seconds);
  if (problem.empty()) timeout = std::chrono::seconds(int64_t(std::ceil(seconds)));
  return problem;
}

/// The largest committee `train --committee` starts: each member is a training run with a folder
/// of its own (DP-GEN's committees have 4; a few dozen is already many).
constexpr int kMaxCommitteeSize = 1000;

/// --committee's value: a whole number of members, 1 to kMaxCommitteeSize.
std::string parse_committee_size(const std::string& value, int& size) {
  int number = 0;
  std::string problem = positive_integer_problem(value, number);
  if (problem.empty() && number > kMaxCommitteeSize)
    problem = "expected at most " + std::to_string(kMaxCommitteeSize) +
              " members (each is a training run with a folder of its own), got '" + value + "'";
  if (problem.empty()) size = number;
  return problem;
}

/// Reads train's arguments into `out`; false when --help printed the usage.
bool read_train_arguments(const std::vector<std::string>& args, TrainArguments& out) {
  CommandLine line("train", kTrainUsage);
  line.add_positional("input", out.input, [](const std::string& first, const std::string& other) {
    return "expected one input file, got '" + first + "' and '" + other + "'";
  });
  line.add_value("--restart", out.options.restart);
  line.add_value("--init-model", out.options.init_model);
  line.add_value("--finetune", out.options.finetune);
  line.add_value("-o,--output", out.options.output_dir);
  line.add_value("--step-times", out.options.step_times);
  line.add_flag("--count-ops", out.options.count_ops);
  line.add_value("--device", out.options.device);
  line.add_value("--distributed", out.distributed, one_of({"auto", "on", "off"}, "auto, on or off"));
  line.add_value("--backend", out.comm_options.backend,
                 one_of({"auto", "gloo", "mpi", "nccl"}, "auto, gloo, mpi or nccl"));
  line.add_value("--log-mode", out.log_mode, one_of({"master", "collect", "workers"}, "master, collect or workers"));
  line.add_parsed("--timeout", out.comm_options.timeout, parse_timeout);
  line.add_parsed("--committee", out.committee.size, parse_committee_size);
  line.add_parsed("--member", out.committee.member, non_negative_integer_problem);
  line.add_parsed("--committee-jobs", out.committee.jobs, positive_integer_problem);
  if (!line.read(args)) return false;
  if (out.input.empty()) throw line.error("train: an input file is required");
  if (out.options.count_ops && out.options.step_times.empty())
    throw line.error("train: --count-ops needs --step-times <file> (the counts are written there)");
  if (!out.options.restart.empty() && !out.options.init_model.empty())
    throw line.error("train: --restart and --init-model exclude each other");
  if (!out.options.finetune.empty() && (!out.options.restart.empty() || !out.options.init_model.empty()))
    throw line.error(std::string("train: --finetune and ") +
                     (out.options.restart.empty() ? "--init-model" : "--restart") + " exclude each other");
  const CommitteeRequest& committee = out.committee;
  if (committee.size == 0 && committee.member >= 0)
    throw line.error("train: --member " + std::to_string(committee.member) + " needs --committee <N>");
  if (committee.size == 0 && committee.jobs > 0)
    throw line.error("train: --committee-jobs needs --committee <N>");
  if (committee.member >= committee.size)
    throw line.error("train: --member " + std::to_string(committee.member) + " is not a member of --committee " +
                     std::to_string(committee.size) + " (members 0 to " + std::to_string(committee.size - 1) + ")");
  if (committee.member >= 0 && committee.jobs > 0)
    throw line.error("train: --committee-jobs chooses how a whole committee runs; with --member " +
                     std::to_string(committee.member) + " this process trains that member alone");
  return true;
}

/// Trains on this rank, its standard output per `log_mode`, and returns the exit code. Rank 0 holds
/// the output folder's lock (archive::RunLock) while it trains. A failure is printed here: once, by
/// rank 0, when every rank raised it; else naming the rank, and then announced to the other ranks.
int run_training(const train::TrainConfig& config, const train::TrainOptions& options, dist::Communicator& comm,
                 const std::string& log_mode) {
  const int rank = comm.rank();
  std::unique_ptr<RankOutput> output;
  const auto fail = [&](const std::exception& e) {
    std::cout.flush();
    if (output) output->restore();
    const auto* error = dynamic_cast<const Error*>(&e);
    if (error != nullptr && error->raised_on_every_rank()) {
      if (rank == 0) print_error_line(std::string("mlip: error: ") + e.what());
      return kExitError;
    }
    // Print first (MPI's announcement aborts the job), then tell the other ranks.
    const std::string what = library_error_text(e);
    const bool named = what.rfind("rank ", 0) == 0;
    print_error_line("mlip: error" + (comm.size() > 1 && !named ? " on rank " + std::to_string(rank) : std::string()) +
                     ": " + what);
    comm.announce_failure(what);
    return kExitError;
  };
  // Rank 0 owns the output folder until training returns (docs/robustness.md "A run owns its
  // output folder"), from before any file is written there.
  archive::RunLock folder_lock;
  try {
    const std::string dir = options.output_dir.empty() ? "." : options.output_dir;
    if (rank == 0) folder_lock = archive::RunLock::for_folder(dir, "-o " + dir);
    // Under --log-mode workers the other ranks write their logs there: only once rank 0 holds it
    // (a refused lock reaches them here as rank 0's announced failure).
    if (log_mode == "workers" && comm.size() > 1) comm.barrier();
  } catch (const std::exception& e) {
    return fail(e);
  }
  output = std::make_unique<RankOutput>(rank, log_mode, options.output_dir);
  try {
    // Rank 0 writes every file: its paths are checked before any work (docs/robustness.md).
    if (rank == 0) check_training_outputs(config, options);
    g_doing = "training";
    const int code = train::train(config, options);
    output->restore();
    return code;
  } catch (const std::exception& e) {
    return fail(e);
  }
}

/// `mlip train --committee N` without --member, as the parent of the members' processes.
int train_committee(const TrainArguments& arguments, const dist::LaunchEnv& launch) {
  const CommitteeRequest& committee = arguments.committee;
  if (launch.world_size > 1)
    throw Error(std::string("--committee ") + std::to_string(committee.size) + " under " +
                dist::launcher_name(launch.launcher) + " with " + std::to_string(launch.world_size) +
                " ranks: run each member with --member k instead (e.g. a Slurm array job: mlip train " +
                arguments.input + " --committee " + std::to_string(committee.size) +
                " --member $SLURM_ARRAY_TASK_ID), or start the committee without a launcher");
  check_input_file(arguments.input, "the training input");
  check_member_sources(arguments.options, committee.size);
  g_doing = "reading the training input " + arguments.input;
  const train::TrainConfig config = train::load_train_config(arguments.input);  // its errors once, not N times
  CommitteeLaunch run;
  run.input = arguments.input;
  run.size = committee.size;
  run.options = arguments.options;
  run.lcurve_name = config.disp_file;
  run.plan = plan_committee(committee.size, committee.jobs, usable_cores());
  g_doing = "training a committee";
  return run_committee(run);
}

int train_command(const std::vector<std::string>& args) {
  TrainArguments arguments;
  if (!read_train_arguments(args, arguments)) return kExitOk;
  train::TrainOptions& options = arguments.options;
  const dist::LaunchEnv launch = launch_for(arguments.distributed);
  const CommitteeRequest& committee = arguments.committee;
  if (committee.size > 0 && committee.member < 0) return train_committee(arguments, launch);
  if (committee.size > 0) {
    options = member_options(options, committee.member);
    if (launch.rank == 0)
      std::cout << "committee member " << committee.member << " of " << committee.size << ": seeds + "
                << committee.member << ", output " << options.output_dir << std::endl;
  }
  check_input_file(arguments.input, "the training input");
  if (!options.restart.empty()) check_checkpoint_path(options.restart, "the checkpoint to restart from");
  if (!options.init_model.empty()) check_checkpoint_path(options.init_model, "the checkpoint to start from");
  if (!options.finetune.empty()) check_checkpoint_path(options.finetune, "the model to fine-tune");
  g_doing = "reading the training input " + arguments.input;
  // The input and the device come first: --backend auto picks NCCL for ranks on CUDA devices.
  const train::TrainConfig config = train::load_train_config(arguments.input);
  const c10::Device device = options.device.empty()
                                 ? train::resolve_device(config.device, "training.device", launch.local_rank)
                                 : train::resolve_device(options.device, "--device", launch.local_rank);
  options.device = device.str();
  arguments.comm_options.cuda = device.is_cuda();
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(launch, arguments.comm_options);
  options.comm = comm.get();
  options.launch = &launch;
  return run_training(config, options, *comm, arguments.log_mode);
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

/// compress's -e: a number of at least 1 (the coarse grid reaches that many times the data's range).
std::string parse_extrapolation(const std::string& value, double& extrapolate) {
  double number = 0.0;
  std::string problem = positive_number_problem(value, number);
  if (problem.empty() && number < 1) problem = "expected a number of at least 1, got '" + value + "'";
  if (problem.empty()) extrapolate = number;
  return problem;
}

/// compress's -f: a whole number of MD steps (-1: at the end of the run).
std::string parse_check_frequency(const std::string& value, int64_t& steps) {
  std::size_t used = 0;
  long long number = 0;
  try {
    number = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty())
    return "expected a whole number of steps (-1: at the end of the run), got '" + value + "'";
  steps = number;
  return "";
}

/// Reads compress's arguments into `request`; false when --help printed the usage.
bool read_compress_arguments(const std::vector<std::string>& args, frozen::CompressRequest& request) {
  using ValueArgument = CommandLine::ValueArgument;
  CommandLine line("compress", kCompressUsage);
  line.add_value("-i,--input", request.input);
  line.add_value("-o,--output", request.output);
  line.add_parsed("-s,--step", request.options.step, positive_number_problem, ValueArgument::kAny);
  line.add_parsed("-e,--extrapolate", request.options.extrapolate, parse_extrapolation, ValueArgument::kAny);
  line.add_parsed("-f,--frequency", request.options.check_frequency, parse_check_frequency, ValueArgument::kAny);
  line.add_value("-t,--training-script", request.training_input);
  line.add_parsed("--min-distance", request.options.min_distance, positive_number_problem, ValueArgument::kAny);
  if (!line.read(args)) return false;
  if (!request.training_input.empty() && request.options.min_distance > 0)
    throw line.error("compress: -t and --min-distance: give one of them");
  return true;
}

int compress_command(const std::vector<std::string>& args) {
  frozen::CompressRequest request;
  request.input = "frozen_model.pt";
  request.output = "frozen_model_compressed.pt";
  if (!read_compress_arguments(args, request)) return kExitOk;
  check_checkpoint_path(request.input, "the model");
  if (!request.training_input.empty()) check_input_path(request.training_input, "the training input");
  archive::check_output_target(request.output, archive::SpecialTarget::kRefuse, "compress -o " + request.output,
                               "the compressed model");
  const archive::RunLock lock = archive::RunLock::for_output(request.output, "-o " + request.output);
  g_doing = "compressing " + request.input;
  frozen::compress(request, std::cout);
  std::cout << "compressed " << request.input << " into " << request.output << "\n";
  return kExitOk;
}

int freeze_command(const std::vector<std::string>& args) {
  std::string checkpoint = ".", output = "frozen_model.pt";
  CommandLine line("freeze", kFreezeUsage);
  line.add_value("-c,--checkpoint", checkpoint);
  line.add_value("-o,--output", output);
  if (!line.read(args)) return kExitOk;
  check_checkpoint_path(checkpoint, "the checkpoint");
  archive::check_output_target(output, archive::SpecialTarget::kRefuse, "freeze -o " + output, "the frozen model");
  const archive::RunLock lock = archive::RunLock::for_output(output, "-o " + output);
  g_doing = "freezing " + checkpoint;
  frozen::freeze(checkpoint, output);
  std::cout << "froze " << archive::resolve_checkpoint(checkpoint) << " into " << output << "\n";
  return kExitOk;
}

/// test's -n: a positive whole number of frames per system.
std::string parse_frame_count(const std::string& value, int64_t& frames) {
  // Digits alone: read exactly, up to the largest int64.
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) {
    errno = 0;
    const long long number = std::strtoll(value.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return "expected a positive integer of at most " + std::to_string(std::numeric_limits<int64_t>::max()) +
             ", got '" + value + "'";
    if (number < 1) return "expected a positive integer, got '" + value + "'";
    frames = int64_t(number);
    return "";
  }
  // Other forms (1e6): a whole number that a double holds exactly (up to 2^53).
  double number = 0.0;
  const std::string problem = positive_number_problem(value, number);
  if (!problem.empty()) return problem;
  constexpr double kLargest = 9007199254740992.0;
  if (number > kLargest)
    return "expected a positive integer of at most 9007199254740992 (or its digits, up to " +
           std::to_string(std::numeric_limits<int64_t>::max()) + "), got '" + value + "'";
  frames = int64_t(number);
  if (double(frames) != number) return "expected a positive integer, got '" + value + "'";
  return "";
}

const char* kChangeBiasUsage =
    "usage: mlip change-bias <model> -s <system>... [-n <frames>] -o <model.pt>\n"
    "       mlip change-bias <model> -b <element>=<eV>... -o <model.pt>\n"
    "\n"
    "Writes a copy of a frozen model, compressed model or checkpoint whose per-element energy\n"
    "shifts (eV per atom, added after the network) are re-fitted to the systems' energies by least\n"
    "squares, or set to the given values, as DeePMD-kit's dp change-bias does (docs/training.md\n"
    "\"Changing the energy shifts\"). Forces and virials do not change; a checkpoint stays\n"
    "restartable.\n"
    "\n"
    "options:\n"
    "  -s, --system <path> ...  labelled systems (DeePMD npy folders, extended XYZ, HDF5)\n"
    "  -n, --numb-frames <N>    the first N frames of each system (default: all)\n"
    "  -b, --bias <el>=<eV> ... set these elements' shifts (e.g. -b H=-13.6 O=-432.1); the others keep theirs\n"
    "  -o, --output <path>      output file (required; not the model itself)\n"
    "  -h, --help               show this help\n";

/// change-bias's -b: "<element>=<eV>" items into `values`.
void parse_bias_values(const std::vector<std::string>& items, std::map<std::string, double>& values,
                       const CommandLine& line) {
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    double value = 0.0;
    const std::string number = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::string problem = eq == std::string::npos || eq == 0 ? "expected <element>=<eV>" : "";
    if (problem.empty()) {
      char* end = nullptr;
      value = std::strtod(number.c_str(), &end);
      if (number.empty() || *end != '\0' || !std::isfinite(value)) problem = "expected a finite number of eV after '='";
    }
    if (!problem.empty()) throw line.error("-b " + item + ": " + problem + " (e.g. -b H=-13.6 O=-432.1)");
    if (!values.emplace(item.substr(0, eq), value).second)
      throw line.error("-b " + item + ": " + item.substr(0, eq) + " is given twice");
  }
}

int change_bias_command(const std::vector<std::string>& args) {
  if (dist::detect_launch([](const char* name) { return std::getenv(name); }).rank > 0) return kExitOk;
  frozen::ChangeBiasRequest request;
  std::vector<std::string> bias_items;
  CommandLine line("change-bias", kChangeBiasUsage);
  line.add_positional("model", request.model, [](const std::string& first, const std::string& other) {
    return "one model is changed at a time, got " + first + " and " + other;
  });
  line.add_list("-s,--system", request.systems, "expected at least one system path");
  line.add_parsed("-n,--numb-frames", request.frames_per_system, parse_frame_count);
  line.add_list("-b,--bias", bias_items, "expected <element>=<eV> values, e.g. -b H=-13.6 O=-432.1");
  line.add_value("-o,--output", request.output);
  add_label_key_options(line, request.keys);
  if (!line.read(args)) return kExitOk;
  parse_bias_values(bias_items, request.values, line);
  if (request.model.empty()) throw line.error("change-bias: the model is required");
  if (request.output.empty()) throw line.error("change-bias: -o <output> is required");
  if (request.systems.empty() == request.values.empty())
    throw line.error(request.systems.empty() ? "change-bias: give systems to re-fit to (-s) or values to set (-b)"
                                             : "change-bias: -s (re-fit) and -b (set) exclude each other");
  if (!request.values.empty() && request.frames_per_system > 0)
    throw line.error("change-bias: -n counts frames of -s systems; with -b there are none");
  check_checkpoint_path(request.model, "the model");
  for (const auto& system : request.systems) check_input_path(system, "the system");
  archive::check_output_target(request.output, archive::SpecialTarget::kRefuse, "change-bias -o " + request.output,
                               "the changed model");
  const archive::RunLock lock = archive::RunLock::for_output(request.output, "-o " + request.output);
  g_doing = "changing the energy shifts of " + request.model;
  frozen::change_bias(request, std::cout);
  std::cout << "wrote " << request.output << "\n";
  return kExitOk;
}

/// Reads test's arguments into `options`; false when --help printed the usage.
bool read_test_arguments(const std::vector<std::string>& args, frozen::TestOptions& options) {
  CommandLine line("test", kTestUsage);
  line.add_value("-m,--model", options.model);
  line.add_list("-s,--system", options.systems, "expected at least one system path");
  line.add_parsed("-n,--numb-test", options.numb_test, parse_frame_count);
  line.add_value("-d,--detail", options.detail);
  line.add_value("--xyz", options.xyz);
  add_label_key_options(line, options.keys);
  if (!line.read(args)) return false;
  if (options.model.empty()) throw line.error("test: -m <model> is required");
  if (options.systems.empty()) throw line.error("test: -s <system> is required");
  return true;
}

int test_command(const std::vector<std::string>& args) {
  // `mlip test` runs on one rank: under a launcher, the other ranks leave at once.
  if (dist::detect_launch([](const char* name) { return std::getenv(name); }).rank > 0) return kExitOk;
  frozen::TestOptions options;
  if (!read_test_arguments(args, options)) return kExitOk;
  check_checkpoint_path(options.model, "the model");
  for (const auto& system : options.systems) check_input_path(system, "the system");
  std::vector<archive::ReadPath> inputs = model_inputs({options.model});
  for (const auto& system : options.systems) inputs.push_back({system, "the system"});
  if (!options.detail.empty()) check_test_detail_outputs(options.detail, inputs);
  if (!options.xyz.empty()) {
    archive::check_output_target(options.xyz, archive::SpecialTarget::kStream, "--xyz " + options.xyz,
                                 "the predictions file");
    archive::check_output_is_not_an_input(options.xyz, "--xyz " + options.xyz, inputs);
  }
  // Held while testing: another mlip run writing the same files is refused (streams are not locked).
  archive::RunLock detail_lock, xyz_lock;
  if (!options.detail.empty()) detail_lock = archive::RunLock::for_output(options.detail, "-d " + options.detail);
  if (!options.xyz.empty()) xyz_lock = archive::RunLock::for_output(options.xyz, "--xyz " + options.xyz);
  g_doing = "testing " + options.model;
  return frozen::run_test(options);
}

/// What is wrong with `value` as a deviation level (a finite number >= 0), or "".
std::string parse_relative_level(const std::string& value, std::optional<double>& level) {
  double v = 0.0;
  const std::string problem = non_negative_number_problem(value, v);
  if (problem.empty()) level = v;
  return problem;
}

int model_deviation_command(const std::vector<std::string>& args) {
  // One process: under a launcher, the other ranks leave at once.
  if (dist::detect_launch([](const char* name) { return std::getenv(name); }).rank > 0) return kExitOk;
  frozen::DeviationOptions options;
  CommandLine line("model-devi", kModelDeviUsage);
  line.add_list("-m,--models", options.models, "expected two or more model paths");
  line.add_list("-s,--system", options.systems, "expected at least one system path");
  line.add_value("-o,--output", options.output);
  line.add_parsed("-f,--frequency", options.frequency, parse_frame_count);
  line.add_flag("--atomic", options.atomic);
  line.add_parsed("--relative", options.relative, parse_relative_level);
  line.add_parsed("--relative_v,--relative-v", options.relative_v, parse_relative_level);
  std::vector<std::string> select;
  line.add_list("--select", select, "expected two levels, LO and HI (eV/Å)");
  const CLI::Option* candidates = line.add_value("--candidates", options.candidates);
  add_label_key_options(line, options.keys);
  if (!line.read(args)) return kExitOk;
  if (!select.empty()) {
    double levels[2] = {0, 0};
    for (size_t k = 0; k < select.size() && k < 2; ++k) {
      std::optional<double> level;
      const std::string problem = parse_relative_level(select[k], level);
      if (!problem.empty()) throw line.error("--select: " + problem);
      levels[k] = *level;
    }
    if (select.size() != 2 || !(levels[0] < levels[1]))
      throw line.error("--select: expected two levels LO < HI (eV/Å), got " + std::to_string(select.size()) +
                       " value(s): '" + select[0] + (select.size() > 1 ? " " + select[1] : std::string()) +
                       (select.size() > 2 ? " ..." : "") + "'");
    options.select = std::make_pair(levels[0], levels[1]);
  } else if (candidates->count() > 0) {
    throw line.error("--candidates: give --select <LO> <HI> too (which frames are candidates)");
  }
  if (options.models.size() < 2)
    throw line.error("model-devi: -m: expected two or more models, got " + std::to_string(options.models.size()));
  if (options.systems.empty()) throw line.error("model-devi: -s <system> is required");
  for (const auto& model : options.models) check_checkpoint_path(model, "the model");
  for (const auto& system : options.systems) check_input_path(system, "the system");
  archive::check_output_target(options.output, archive::SpecialTarget::kStream, "-o " + options.output,
                               "the model deviation file");
  std::vector<archive::ReadPath> inputs = model_inputs(options.models);
  for (const auto& system : options.systems) inputs.push_back({system, "the system"});
  archive::check_output_is_not_an_input(options.output, "model-devi -o " + options.output, inputs);
  if (options.select) {
    archive::check_output_target(options.candidates, archive::SpecialTarget::kStream,
                                 "--candidates " + options.candidates, "the candidates file");
    archive::check_output_is_not_an_input(options.candidates, "model-devi --candidates " + options.candidates,
                                          inputs);
    archive::check_outputs_differ(options.output, "-o " + options.output, options.candidates,
                                  "--candidates " + options.candidates);
  }
  g_doing = "computing the model deviation";
  return frozen::run_model_deviation(options);
}

int plot_command(const std::vector<std::string>& args) {
  std::string lcurve, test, output;
  CommandLine line("plot", kPlotUsage);
  const CLI::Option* lcurve_option = line.add_value("-l,--lcurve", lcurve);
  const CLI::Option* test_option = line.add_value("-t,--test", test);
  const CLI::Option* output_option = line.add_value("-o,--output", output);
  if (!line.read(args)) return kExitOk;
  // tools/mlip_plot.py's own options, for those given.
  std::vector<std::string> script_args;
  if (lcurve_option->count() > 0) script_args.insert(script_args.end(), {"--lcurve", lcurve});
  if (test_option->count() > 0) script_args.insert(script_args.end(), {"--test", test});
  if (output_option->count() > 0) script_args.insert(script_args.end(), {"--output", output});
  if (lcurve_option->count() == 0 && test_option->count() == 0)
    throw line.error("plot: nothing to draw: give -l and/or -t");
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
                << ")\nBLAS: " << compat::blas_kernels_note() << "\n";
      return kExitOk;
    }
    if (cmd == "neighbor-stat") return neighbor_stat_command(rest);
    if (cmd == "train") return train_command(rest);
    if (cmd == "freeze") return freeze_command(rest);
    if (cmd == "compress") return compress_command(rest);
    if (cmd == "change-bias") return change_bias_command(rest);
    if (cmd == "test") return test_command(rest);
    if (cmd == "model-devi") return model_deviation_command(rest);
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
