#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace mlip::test {

/// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// path() + "/" + name
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes text to a file (creating parent folders).
void write_text(const std::string& path, const std::string& text);
/// The bytes of a file ("" when it cannot be read).
std::string read_file(const std::string& path);

/// Result of running a shell command: exit status and captured stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs `command` through /bin/sh, capturing stdout and stderr separately.
CommandResult run_command(const std::string& command);

/// The message of the mlip::Error that f throws, or "(no error)".
std::string error_of(const std::function<void()>& f);

/// Whether haystack contains needle.
bool contains(const std::string& haystack, const std::string& needle);

/// A frame of atoms for model and environment tests.
struct Frame {
  std::vector<double> pos;   ///< [n, 3] Å
  std::vector<double> cell;  ///< [9] rows are cell vectors, or empty (non-periodic)
  std::vector<int> types;    ///< [n] 0 or 1
  std::array<bool, 3> pbc{{true, true, true}};
  int natoms() const { return int(types.size()); }
};

/// n atoms uniformly in a box of edge `length` (the cell {L,0,0, skew[0],L,0, skew[1],skew[2],L}
/// when periodic), no two closer than min_dist (rejection sampling), type 0 with probability
/// p_type0. Seeded: the same arguments give the same frame.
Frame random_frame(int n, bool periodic, unsigned seed, double length, std::array<double, 3> skew, double min_dist,
                   double p_type0);

/// Path of the shared DFT water data (../shared/data/water), or "" when absent.
std::string shared_water_dir();

/// Writes a small non-periodic DeePMD system (n_o atoms of type O, n_h of type H, `frames`
/// frames, type_map.raw O H) into `dir`, with labels from a smooth pair potential
/// E = sum_{pairs} exp(-2(r-1.2)) - 2 exp(-(r-1.2)) minus 10 eV per O and 5 per H, and its
/// exact forces.
void write_system(const std::string& dir, int n_o, int n_h, int frames, unsigned seed);

}  // namespace mlip::test
