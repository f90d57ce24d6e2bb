#include "test_util.h"

#include "data/npy.h"
#include "error.h"

#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
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

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
}  // namespace

TempDir::~TempDir() {
  // nftw, not std::filesystem::remove_all: pip's LibTorch exports a broken copy of the latter
  // that a test binary may bind to where the link order cannot be controlled
  // (docs/gpu_check.md "std::filesystem and pip's LibTorch"). Depth first, links not followed.
  ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void write_text(const std::string& path, const std::string& text) {
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

CommandResult run_command(const std::string& command) {
  TempDir tmp;
  std::string out_file = tmp / "out", err_file = tmp / "err";
  std::string full = command + " >" + out_file + " 2>" + err_file + " </dev/null";
  int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_file);
  r.err = read_file(err_file);
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

/// A small non-periodic DeePMD system with labels from a smooth pair potential
/// E = sum_{r<4} (exp(-2(r-1.2)) - 2 exp(-(r-1.2))) * w(r), forces by its exact gradient.
void write_system(const std::string& dir, int n_o, int n_h, int frames, unsigned seed) {
  const int n = n_o + 2 * n_h / 2;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 4.0);
  std::vector<double> coord, force, energy;
  for (int f = 0; f < frames; ++f) {
    std::vector<double> x;
    while (int(x.size()) < 3 * (n_o + n_h)) {
      double p[3] = {u(rng), u(rng), u(rng)};
      bool ok = true;
      for (size_t k = 0; k < x.size(); k += 3) {
        double r2 = 0;
        for (int c = 0; c < 3; ++c) r2 += (p[c] - x[k + c]) * (p[c] - x[k + c]);
        ok = ok && r2 > 0.8 * 0.8;
      }
      if (ok) x.insert(x.end(), p, p + 3);
    }
    const int na = n_o + n_h;
    std::vector<double> fr(size_t(3 * na), 0.0);
    double e = 0;
    for (int i = 0; i < na; ++i)
      for (int j = i + 1; j < na; ++j) {
        double d[3], r2 = 0;
        for (int c = 0; c < 3; ++c) d[c] = x[size_t(3 * j + c)] - x[size_t(3 * i + c)], r2 += d[c] * d[c];
        const double r = std::sqrt(r2);
        const double a = std::exp(-2 * (r - 1.2)), b = std::exp(-(r - 1.2));
        e += a - 2 * b;
        const double de = -2 * a + 2 * b;  // dE/dr
        for (int c = 0; c < 3; ++c) {
          fr[size_t(3 * i + c)] += de * d[c] / r;
          fr[size_t(3 * j + c)] -= de * d[c] / r;
        }
      }
    coord.insert(coord.end(), x.begin(), x.end());
    force.insert(force.end(), fr.begin(), fr.end());
    energy.push_back(e - 10.0 * n_o - 5.0 * n_h);
  }
  (void)n;
  std::string types;
  for (int i = 0; i < n_o; ++i) types += "0\n";
  for (int i = 0; i < n_h; ++i) types += "1\n";
  write_text(dir + "/type.raw", types);
  write_text(dir + "/type_map.raw", "O\nH\n");
  write_text(dir + "/nopbc", "");
  const int64_t na = n_o + n_h;
  fs::create_directories(dir + "/set.000");
  mlip::data::write_npy(dir + "/set.000/coord.npy", {frames, 3 * na}, coord);
  mlip::data::write_npy(dir + "/set.000/force.npy", {frames, 3 * na}, force);
  mlip::data::write_npy(dir + "/set.000/energy.npy", {frames}, energy);
}

}  // namespace mlip::test
