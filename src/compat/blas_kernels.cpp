#include "compat/blas_kernels.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

namespace mlip::compat {

namespace {

using NameFunction = char* (*)();
using VoidFunction = void (*)();

/// `name` from the process's OpenBLAS: first in the global scope (a program linked with it),
/// then in the library itself when something loaded it privately (LAMMPS loading mlip as a
/// plugin); nullptr where neither has it.
void* openblas_symbol(const char* name) {
  if (void* f = dlsym(RTLD_DEFAULT, name)) return f;
  static void* const library = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
  return library ? dlsym(library, name) : nullptr;
}

bool same_core(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

/// "family F model M" of this CPU from /proc/cpuinfo, for the log; empty where unreadable.
std::string cpu_family_and_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, family, model;
  while (std::getline(in, line) && (family.empty() || model.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "cpu family") family = value;
    if (key == "model") model = value;
  }
  return family.empty() || model.empty() ? "" : "family " + family + " model " + model;
}

std::mutex g_note_mutex;
std::string g_note;  // the last use_the_cpus_blas_kernels()'s note

}  // namespace

BlasKernels blas_kernels() {
  BlasKernels k;
  if (auto config = reinterpret_cast<NameFunction>(openblas_symbol("openblas_get_config"))) k.config = config();
  if (auto name = reinterpret_cast<NameFunction>(openblas_symbol("openblas_get_corename"))) k.core = name();
  k.switchable = !k.core.empty() && openblas_symbol("gotoblas_dynamic_init") != nullptr &&
                 openblas_symbol("gotoblas_dynamic_quit") != nullptr;
  return k;
}

std::string cpu_blas_core() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // libgcc's answers include the operating system's support (XCR0) for the vector state.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

bool core_lacks_avx2(const std::string& core) {
  static const char* const kWithoutAvx2[] = {
      "Unknown",   "Katmai", "Coppermine",  "Northwood", "Prescott",  "Banias",     "Atom",
      "Core2",     "Penryn", "Dunnington",  "Nehalem",   "Athlon",    "Opteron",    "Opteron_SSE3",
      "Barcelona", "Nano",   "Sandybridge", "Bobcat",    "Bulldozer", "Piledriver", "Steamroller"};
  for (const char* name : kWithoutAvx2)
    if (same_core(core, name)) return true;
  return false;
}

std::string set_openblas_core(const std::string& core) {
  const auto init = reinterpret_cast<VoidFunction>(openblas_symbol("gotoblas_dynamic_init"));
  const auto quit = reinterpret_cast<VoidFunction>(openblas_symbol("gotoblas_dynamic_quit"));
  const auto name = reinterpret_cast<NameFunction>(openblas_symbol("openblas_get_corename"));
  if (!init || !quit || !name) return "";
  // OpenBLAS reads OPENBLAS_CORETYPE in its start-up (an unknown name falls back to Prescott);
  // the user's environment is put back afterwards.
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = user ? user : "";
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  quit();
  init();
  if (user)
    ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    ::unsetenv("OPENBLAS_CORETYPE");
  return name();
}

BlasKernelChoice use_the_cpus_blas_kernels() {
  BlasKernelChoice choice;
  const BlasKernels k = blas_kernels();
  choice.before = choice.after = k.core;
  const std::string wanted = cpu_blas_core();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  if (k.core.empty()) {
    choice.note = "no OpenBLAS in this process";
  } else if (user) {
    choice.note = "OpenBLAS, " + k.core + " kernels (OPENBLAS_CORETYPE=" + user + ")";
  } else if (wanted.empty() || !core_lacks_avx2(k.core)) {
    choice.note = "OpenBLAS, " + k.core + " kernels";
  } else if (!k.switchable) {
    choice.note = "OpenBLAS, " + k.core + " kernels, without the AVX2 this CPU has: set OPENBLAS_CORETYPE=" + wanted +
                  " (or use an OpenBLAS built for this CPU) for faster matrix products";
  } else {
    // A build without the AVX-512 kernels falls back to Prescott: then try the AVX2 ones.
    std::string now = set_openblas_core(wanted);
    if (core_lacks_avx2(now) && wanted != "Haswell") now = set_openblas_core("Haswell");
    if (core_lacks_avx2(now)) {
      now = set_openblas_core(k.core);
      choice.note = "OpenBLAS, " + now + " kernels (it has no kernels with AVX2 for this CPU)";
    } else {
      choice.switched = true;
      const std::string cpu = cpu_family_and_model();
      choice.note = "OpenBLAS, " + now + " kernels (switched from the " + k.core + " kernels it chose for this CPU" +
                    (cpu.empty() ? "" : ", " + cpu) + "; OPENBLAS_CORETYPE chooses)";
    }
    choice.after = now;
  }
  // A later call that finds the kernels already switched keeps the note saying so.
  std::lock_guard<std::mutex> lock(g_note_mutex);
  if (choice.switched || g_note.find("switched from") == std::string::npos) g_note = choice.note;
  return choice;
}

std::string blas_kernels_note() {
  {
    std::lock_guard<std::mutex> lock(g_note_mutex);
    if (!g_note.empty()) return g_note;
  }
  const BlasKernels k = blas_kernels();
  return k.core.empty() ? "no OpenBLAS in this process" : "OpenBLAS, " + k.core + " kernels";
}

}  // namespace mlip::compat
