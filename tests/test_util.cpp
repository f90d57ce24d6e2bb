#include "test_util.h"

#include "error.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace mlip::test {

TempDir::TempDir() {
  std::string templ = (fs::temp_directory_path() / "mlip_test_XXXXXX").string();
  if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_text(const std::string& path, const std::string& text) {
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
}

static std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult run_command(const std::string& command) {
  TempDir tmp;
  std::string out_file = tmp / "out", err_file = tmp / "err";
  std::string full = command + " >" + out_file + " 2>" + err_file + " </dev/null";
  int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_file);
  r.err = slurp(err_file);
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mlip::Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

Frame random_frame(int n, bool periodic, unsigned seed, double length, std::array<double, 3> skew, double min_dist,
                   double p_type0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Frame f;
  const double L = length;
  if (periodic) f.cell = {L, 0, 0, skew[0], L, 0, skew[1], skew[2], L};
  f.pbc = {{periodic, periodic, periodic}};
  while (f.natoms() < n) {
    double p[3] = {L * u(rng), L * u(rng), L * u(rng)};
    bool ok = true;
    for (int k = 0; k < f.natoms() && ok; ++k) {
      double r2 = 0;
      for (int c = 0; c < 3; ++c) r2 += (p[c] - f.pos[size_t(3 * k + c)]) * (p[c] - f.pos[size_t(3 * k + c)]);
      ok = r2 > min_dist * min_dist;
    }
    if (!ok) continue;
    f.pos.insert(f.pos.end(), p, p + 3);
    f.types.push_back(u(rng) < p_type0 ? 0 : 1);
  }
  return f;
}

std::string shared_water_dir() {
  std::string d = std::string(MLIP_SHARED_DATA) + "/water";
  if (fs::exists(d + "/data_0/type.raw")) return d;
  return "";
}

}  // namespace mlip::test
