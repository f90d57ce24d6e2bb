#include "md/lammps_driver.h"

#include <cctype>
#include <iostream>

#ifdef MLIP_HAVE_LAMMPS
#include <mpi.h>

#include <array>
#include <cstring>
#include <exception>
#include <typeinfo>
#include <utility>

// LAMMPS
#include <lammps/error.h>

#include "force.h"
#include "input.h"
#include "lammps.h"

#include "md/pair_mlip.h"
#endif

namespace mlip::md {
namespace {

/// One `lmp` command-line switch: its long and short names, the fewest values it takes, and
/// whether more may follow (every word up to the next switch).
struct LammpsSwitch {
  const char* name;
  const char* short_name;
  int values;
  bool more;
};

// LAMMPS' src/lammps.cpp (version 20220106, Debian's).
constexpr LammpsSwitch kLammpsSwitches[] = {
    {"-cite", "-c", 1, false},         {"-echo", "-e", 1, false},           {"-help", "-help", 0, false},
    {"-in", "-i", 1, false},           {"-kokkos", "-k", 1, true},          {"-log", "-l", 1, false},
    {"-mdi", "-mdi", 1, false},        {"-mpicolor", "-m", 1, false},       {"-nocite", "-nc", 0, false},
    {"-nonbuf", "-nb", 0, false},      {"-package", "-pk", 1, true},        {"-partition", "-p", 1, true},
    {"-plog", "-pl", 1, false},        {"-pscreen", "-ps", 1, false},       {"-reorder", "-ro", 2, false},
    {"-restart2data", "-r2data", 2, true}, {"-restart2dump", "-r2dump", 4, true}, {"-screen", "-sc", 1, false},
    {"-skiprun", "-sr", 0, false},     {"-suffix", "-sf", 1, true},         {"-var", "-v", 2, true},
};

/// A word LAMMPS takes as a switch: '-' and a letter ("-5" is a value), or a GNU-style "--name".
bool looks_like_switch(const std::string& word) {
  return word.size() > 1 && word[0] == '-' && (std::isalpha(static_cast<unsigned char>(word[1])) || word[1] == '-');
}

const LammpsSwitch* find_switch(const std::string& word) {
  for (const auto& s : kLammpsSwitches)
    if (word == s.name || word == s.short_name) return &s;
  return nullptr;
}

}  // namespace

std::string lammps_argument_problem(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size();) {
    const std::string& word = args[i];
    const LammpsSwitch* s = looks_like_switch(word) ? find_switch(word) : nullptr;
    if (s == nullptr) {
      if (looks_like_switch(word)) return "lammps: unknown option '" + word + "'";
      return "lammps: unexpected argument '" + word + "' (an input script is given with -in <file>)";
    }
    size_t taken = 0;
    while (i + 1 + taken < args.size() && !looks_like_switch(args[i + 1 + taken]) &&
           (taken < size_t(s->values) || s->more))
      ++taken;
    if (taken < size_t(s->values))
      return "lammps: " + word + ": expected " + std::to_string(s->values) + (s->values == 1 ? " value" : " values") +
             ", got " + std::to_string(taken);
    i += 1 + taken;
  }
  return "";
}

std::string lammps_input_script(const std::vector<std::string>& args) {
  std::string script;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "-in" || args[i] == "-i") script = args[i + 1];
  return script;
}

#ifdef MLIP_HAVE_LAMMPS

namespace {

/// Adds pair_style mlip to this LAMMPS' pair styles. Debian's LAMMPS has no plugin loader; its
/// style table is public (docs/lammps.md "Running it").
void register_pair_style(LAMMPS_NS::LAMMPS* lmp) { (*lmp->force->pair_map)["mlip"] = &PairMlip::create; }

// `clear` (and so the usual write_restart / clear / read_restart deck) replaces LAMMPS' Force and
// with it the table of pair styles; the input and its table of commands stay. So every command
// LAMMPS creates from that table (read_data, read_restart, create_box, run, ...) first adds the
// style again: each table entry is replaced by a wrapper that registers, then calls the original
// (docs/lammps.md "After clear"). A wrapper is a plain function, one per slot.
using CommandCreator = LAMMPS_NS::Input::CommandCreator;
constexpr size_t kCommandSlots = 512;
std::array<CommandCreator, kCommandSlots> g_original_commands{};

template <size_t K>
LAMMPS_NS::Command* register_then_create(LAMMPS_NS::LAMMPS* lmp) {
  register_pair_style(lmp);
  return g_original_commands[K](lmp);
}

template <size_t... K>
constexpr std::array<CommandCreator, sizeof...(K)> command_wrappers(std::index_sequence<K...>) {
  return {&register_then_create<K>...};
}

void keep_registered_after_clear(LAMMPS_NS::LAMMPS& lmp) {
  static constexpr auto kWrappers = command_wrappers(std::make_index_sequence<kCommandSlots>());
  size_t k = 0;
  for (auto& entry : *lmp.input->command_map) {
    if (k == kCommandSlots) break;  // more commands than slots: the rest as they are
    g_original_commands[k] = entry.second;
    entry.second = kWrappers[k];
    ++k;
  }
}

}  // namespace
}  // namespace mlip::md

// LAMMPS' `clear`, as LAMMPS defines it (delete and recreate the instance's parts, then the
// command-line settings again), followed by adding pair_style mlip to the new table of pair
// styles, so that the style is known for the whole instance, also to a `pair_style mlip` that
// comes before any command of LAMMPS' table after a `clear` (docs/lammps.md "After clear").
// liblammps.so calls Input::clear through its procedure linkage table, so this definition in the
// mlip executable (exported to the dynamic symbol table: src/md/CMakeLists.txt) takes the place
// of the library's. Where a LAMMPS binds it internally, the library's runs and the command-table
// wrappers above still add the style before read_data, read_restart or create_box.
void LAMMPS_NS::Input::clear() {
  if (narg > 0) error->all(FLERR, std::string("Illegal clear command"));
  lmp->destroy();
  lmp->create();
  lmp->post_create();
  mlip::md::register_pair_style(lmp);
}

namespace mlip::md {

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
    register_pair_style(&lmp);
    keep_registered_after_clear(lmp);
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
