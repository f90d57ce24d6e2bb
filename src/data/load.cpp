#include "data/load.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "data/deepmd_system.h"
#include "data/extxyz.h"
#include "error.h"

namespace fs = std::filesystem;

namespace mlip::data {

namespace {

bool is_xyz_path(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".xyz" || ext == ".extxyz";
}

bool has_set_folder(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("set.", 0) == 0) return true;
  }
  return false;
}

/// The full path of a data path: relative ones are taken relative to base_dir (when non-empty)
/// or the working folder, and normalised; absolute ones are kept as given. No trailing '/'.
std::string resolve_path(const std::string& given, const std::string& base_dir) {
  fs::path p(given);
  if (p.is_relative()) {
    if (!base_dir.empty()) p = fs::path(base_dir) / p;
    std::error_code ec;
    fs::path abs = fs::absolute(p, ec);
    if (!ec) p = abs.lexically_normal();
  }
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

/// Folders under `root` (recursively, following links, sorted) that hold type.raw.
std::vector<std::string> find_system_dirs(const fs::path& root) {
  std::vector<std::string> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(
      root, fs::directory_options::follow_directory_symlink |
                fs::directory_options::skip_permission_denied,
      ec);
  if (ec) throw Error(root.string() + ": cannot list folder (" + ec.message() + ")");
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw Error(root.string() + ": cannot list folder (" + ec.message() + ")");
    if (!it->is_directory()) continue;
    if (fs::exists(it->path() / "type.raw")) {
      found.push_back(it->path().string());
      it.disable_recursion_pending();  // a system's set.* folders hold no further systems
    } else if (it.depth() > 32) {
      it.disable_recursion_pending();  // guards against symlink cycles
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string vec_string(const double* v, int n) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < n; ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

/// Reorders the atoms of every frame so that type ids are non-decreasing (stable).
void sort_atoms_by_type(System& s) {
  const int64_t n = s.natoms();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return s.types[a] < s.types[b]; });
  bool identity = true;
  for (int64_t a = 0; a < n; ++a) identity = identity && order[a] == a;
  if (identity) return;
  auto permute = [&](std::vector<double>& v) {
    if (v.empty()) return;
    std::vector<double> out(v.size());
    for (int64_t f = 0; f < s.nframes; ++f) {
      for (int64_t a = 0; a < n; ++a) {
        for (int d = 0; d < 3; ++d) out[(f * n + a) * 3 + d] = v[(f * n + order[a]) * 3 + d];
      }
    }
    v.swap(out);
  };
  permute(s.coord);
  permute(s.force);
  std::vector<int> types(n);
  for (int64_t a = 0; a < n; ++a) types[a] = s.types[order[a]];
  s.types.swap(types);
}

}  // namespace

std::vector<System> load_systems(const std::vector<std::string>& paths,
                                 std::vector<std::string>& type_map,
                                 const std::string& base_dir) {
  if (paths.empty()) throw Error("data systems: expected at least one path, got none");
  const bool fill_type_map = type_map.empty();
  std::vector<System> systems;
  std::vector<bool> from_xyz;
  for (const std::string& given : paths) {
    const std::string ps = resolve_path(given, base_dir);
    const fs::path p(ps);
    const std::string origin = ps == given ? "" : " (data path '" + given + "')";
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      throw Error(ps + ": no such file or folder" + origin +
                  "; expected a DeePMD system folder (with type.raw), a folder of them, or an "
                  ".xyz/.extxyz file");
    }
    if (fs::is_directory(p)) {
      std::vector<std::string> dirs;
      if (fs::exists(p / "type.raw")) {
        dirs.push_back(ps);
      } else {
        dirs = find_system_dirs(p);
      }
      if (dirs.empty()) {
        std::string hint = has_set_folder(p)
                               ? "; this folder has set.* folders but no type.raw (one integer "
                                 "type id per atom)"
                               : "";
        throw Error(ps + ": no DeePMD system found: no type.raw in this folder or any sub-folder" +
                    origin + hint);
      }
      for (const std::string& d : dirs) {
        systems.push_back(read_deepmd_system(d, type_map));
        from_xyz.push_back(false);
      }
    } else if (is_xyz_path(p)) {
      for (System& s : read_extxyz(ps, type_map)) {
        systems.push_back(std::move(s));
        from_xyz.push_back(true);
      }
    } else {
      throw Error(ps + ": not a DeePMD system folder and not an .xyz/.extxyz file" + origin);
    }
  }

  if (fill_type_map) {
    for (const System& s : systems) {
      for (const std::string& name : s.type_map) {
        if (std::find(type_map.begin(), type_map.end(), name) == type_map.end()) {
          type_map.push_back(name);
        }
      }
    }
    for (size_t k = 0; k < systems.size(); ++k) {
      System& s = systems[k];
      std::vector<int> remap(s.type_map.size());
      for (size_t t = 0; t < s.type_map.size(); ++t) {
        remap[t] = static_cast<int>(std::find(type_map.begin(), type_map.end(), s.type_map[t]) -
                                    type_map.begin());
      }
      for (int& t : s.types) t = remap[t];
      s.type_map = type_map;
      if (from_xyz[k]) sort_atoms_by_type(s);
    }
  }

  for (const System& s : systems) validate_system(s);
  return systems;
}

void validate_system(const System& s) {
  const std::string who = "system " + s.name;
  const int64_t n = s.natoms();
  const int64_t nf = s.nframes;
  auto check_size = [&](const std::vector<double>& v, int64_t expected, const char* what,
                        bool optional) {
    if (optional && v.empty()) return;
    if (static_cast<int64_t>(v.size()) != expected) {
      throw Error(who + ": " + what + " has " + std::to_string(v.size()) + " values, expected " +
                  std::to_string(expected) + " (" + std::to_string(nf) + " frames, " +
                  std::to_string(n) + " atoms)");
    }
  };
  if (n == 0) throw Error(who + ": expected at least one atom, got none");
  if (nf <= 0) throw Error(who + ": expected at least one frame, got " + std::to_string(nf));
  for (size_t a = 0; a < s.types.size(); ++a) {
    if (s.types[a] < 0 || s.types[a] >= static_cast<int>(s.type_map.size())) {
      throw Error(who + ": atom " + std::to_string(a) + " has type id " +
                  std::to_string(s.types[a]) + ", expected 0 <= id < " +
                  std::to_string(s.type_map.size()) + " (size of the type_map)");
    }
  }
  check_size(s.coord, nf * n * 3, "coord", false);
  check_size(s.box, nf * 9, "box", true);
  check_size(s.energy, nf, "energy", true);
  check_size(s.force, nf * n * 3, "force", true);
  check_size(s.virial, nf * 9, "virial", true);

  static const char* kAxis = "xyz";
  for (int64_t f = 0; f < nf; ++f) {
    const std::string frame = who + ": frame " + std::to_string(f);
    for (int64_t a = 0; a < n; ++a) {
      for (int d = 0; d < 3; ++d) {
        const double v = s.coord[(f * n + a) * 3 + d];
        if (!std::isfinite(v)) {
          throw Error(frame + ", atom " + std::to_string(a) + ": coordinate " + kAxis[d] +
                      " is " + (std::isnan(v) ? "NaN" : "Inf") + ", expected a finite number");
        }
      }
    }
    if (!s.force.empty()) {
      for (int64_t a = 0; a < n; ++a) {
        for (int d = 0; d < 3; ++d) {
          const double v = s.force[(f * n + a) * 3 + d];
          if (!std::isfinite(v)) {
            throw Error(frame + ", atom " + std::to_string(a) + ": force " + kAxis[d] + " is " +
                        (std::isnan(v) ? "NaN" : "Inf") + ", expected a finite number");
          }
        }
      }
    }
    if (!s.energy.empty() && !std::isfinite(s.energy[f])) {
      throw Error(frame + ": energy is " + (std::isnan(s.energy[f]) ? "NaN" : "Inf") +
                  ", expected a finite number");
    }
    if (!s.virial.empty()) {
      for (int k = 0; k < 9; ++k) {
        const double v = s.virial[f * 9 + k];
        if (!std::isfinite(v)) {
          throw Error(frame + ": virial component " + std::to_string(k) + " is " +
                      (std::isnan(v) ? "NaN" : "Inf") + ", expected a finite number");
        }
      }
    }
    if (!s.box.empty()) {
      const double* b = s.frame_box(f);
      for (int k = 0; k < 9; ++k) {
        if (!std::isfinite(b[k])) {
          throw Error(frame + ": cell " + vec_string(b, 9) + " has a non-finite component " +
                      std::to_string(k) + ", expected finite numbers");
        }
      }
    }
  }

  const int nperiodic = s.pbc[0] + s.pbc[1] + s.pbc[2];
  if (nperiodic == 0) return;
  if (s.box.empty()) {
    throw Error(who + ": periodic (pbc " + std::string(s.pbc[0] ? "T" : "F") +
                (s.pbc[1] ? " T" : " F") + (s.pbc[2] ? " T" : " F") +
                ") but has no cell; expected box.npy / Lattice, or `nopbc` for a cluster");
  }
  for (int64_t f = 0; f < nf; ++f) {
    const double* b = s.frame_box(f);
    const std::string frame = who + ": frame " + std::to_string(f);
    for (int d = 0; d < 3; ++d) {
      const double* v = b + 3 * d;
      if (s.pbc[d] && v[0] == 0 && v[1] == 0 && v[2] == 0) {
        throw Error(frame + ": cell vector " + std::to_string(d) + " is zero in a periodic "
                    "direction (cell " + vec_string(b, 9) + "), expected a non-singular cell");
      }
    }
    double measure = 0;
    std::string what;
    if (nperiodic == 3) {
      measure = b[0] * (b[4] * b[8] - b[5] * b[7]) - b[1] * (b[3] * b[8] - b[5] * b[6]) +
                b[2] * (b[3] * b[7] - b[4] * b[6]);
      what = "determinant";
    } else if (nperiodic == 2) {
      int d0 = s.pbc[0] ? 0 : 1;
      int d1 = s.pbc[2] ? 2 : 1;
      const double* u = b + 3 * d0;
      const double* v = b + 3 * d1;
      const double cx = u[1] * v[2] - u[2] * v[1];
      const double cy = u[2] * v[0] - u[0] * v[2];
      const double cz = u[0] * v[1] - u[1] * v[0];
      measure = std::sqrt(cx * cx + cy * cy + cz * cz);
      what = "area spanned by the periodic cell vectors";
    } else {
      continue;  // one periodic direction: a non-zero vector suffices
    }
    if (std::abs(measure) < 1e-10) {
      std::ostringstream m;
      m << frame << ": singular cell " << vec_string(b, 9) << ": " << what << " is " << measure
        << ", expected |" << what << "| >= 1e-10";
      throw Error(m.str());
    }
  }
}

}  // namespace mlip::data
