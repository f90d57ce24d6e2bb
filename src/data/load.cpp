#include "data/load.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "data/deepmd_system.h"
#include "data/extxyz.h"
#include "data/hdf5_system.h"
#include "data/lammps_dump.h"
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

bool is_hdf5_path(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".hdf5" || ext == ".h5";
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

/// A folder's identity on its file system (device, inode): two paths to one folder, through
/// symbolic links, have the same.
using FolderIdentity = std::pair<uint64_t, uint64_t>;

std::optional<FolderIdentity> folder_identity(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;  // follows links
  return FolderIdentity{uint64_t(st.st_dev), uint64_t(st.st_ino)};
}

/// Adds to `found` the folders below `dir` (following links) that hold type.raw, not looking
/// inside those (a system's set.* folders hold no further systems). Each real folder is entered
/// once (`seen`, by device and inode): a link back up the tree, or a second link to a folder
/// already read, is skipped with a note (docs/data.md "Folders of systems"), so a link loop
/// neither repeats systems nor runs on; 32 levels below the root at most. Written with the plain
/// directory iterator: pip's LibTorch exports its own, broken copies of libstdc++'s recursive
/// iterator and remove_all (docs/gpu_check.md "std::filesystem and pip's LibTorch"), which a
/// build whose link order cannot be controlled may call.
void add_system_dirs(const fs::path& root, const fs::path& dir, int depth, std::set<FolderIdentity>& seen,
                     std::vector<std::string>& found) {
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) throw Error(root.string() + ": cannot list folder " + dir.string() + " (" + ec.message() + ")");
  std::vector<fs::path> folders;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw Error(root.string() + ": cannot list folder " + dir.string() + " (" + ec.message() + ")");
    std::error_code type_ec;
    if (it->is_directory(type_ec)) folders.push_back(it->path());  // follows links; a dangling link is no folder
  }
  std::sort(folders.begin(), folders.end());  // which of two paths to one folder is read: the first in order
  for (const fs::path& folder : folders) {
    const std::optional<FolderIdentity> identity = folder_identity(folder);
    if (identity && !seen.insert(*identity).second) {
      std::error_code link_ec;
      std::cout << "note: " << root.string() << ": skipped " << folder.string()
                << (fs::is_symlink(folder, link_ec) ? " (a symbolic link)" : "")
                << ": it leads to a folder already read (" << fs::weakly_canonical(folder, link_ec).string()
                << "), so its systems are not read twice\n";
      continue;
    }
    std::error_code type_ec;
    if (fs::exists(folder / "type.raw", type_ec)) {
      found.push_back(folder.string());
    } else if (depth < 32) {
      add_system_dirs(root, folder, depth + 1, seen, found);
    }
  }
}

/// Folders under `root` (recursively, following links, each real folder once, sorted) that hold
/// type.raw.
std::vector<std::string> find_system_dirs(const fs::path& root) {
  std::vector<std::string> found;
  std::set<FolderIdentity> seen;
  if (const auto identity = folder_identity(root)) seen.insert(*identity);
  add_system_dirs(root, root, 0, seen, found);
  std::sort(found.begin(), found.end());
  return found;
}


/// Orders the atoms so that type ids are non-decreasing (stable): the frames' atoms are then
/// read in that order (System::atom_order).
void sort_atoms_by_type(System& s) {
  const int64_t n = s.natoms();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s.types[size_t(a)] < s.types[size_t(b)]; });
  bool identity = true;
  for (int64_t a = 0; a < n; ++a) identity = identity && order[size_t(a)] == a;
  if (identity) return;
  std::vector<int> types(static_cast<size_t>(n));
  for (int64_t a = 0; a < n; ++a) types[size_t(a)] = s.types[size_t(order[size_t(a)])];
  s.types.swap(types);
  s.atom_order = std::move(order);
}

}  // namespace

std::vector<System> load_systems(const std::vector<std::string>& paths,
                                 std::vector<std::string>& type_map,
                                 const std::string& base_dir, Loading loading, const LabelKeys& keys) {
  if (paths.empty()) throw Error("data systems: expected at least one path, got none");
  const bool fill_type_map = type_map.empty();
  std::vector<System> systems;
  // Per system: whether its atoms are sorted by type name order within each frame (extended XYZ
  // and LAMMPS dumps), so sorted again once the type map is extended.
  std::vector<bool> from_xyz;
  for (const std::string& given_path : paths) {
    // "file.hdf5#/group": one group of an HDF5 file.
    std::string given = given_path, hdf5_group;
    const size_t hash = given_path.find('#');
    if (hash != std::string::npos && is_hdf5_path(fs::path(given_path.substr(0, hash)))) {
      given = given_path.substr(0, hash);
      hdf5_group = given_path.substr(hash + 1);
    }
    const std::string ps = resolve_path(given, base_dir);
    const fs::path p(ps);
    const std::string origin = ps == given ? "" : " (data path '" + given + "')";
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      throw Error(ps + ": no such file or folder" + origin +
                  "; expected a DeePMD system folder (with type.raw), a folder of them, an "
                  ".xyz/.extxyz or .hdf5 file, or a LAMMPS dump (.dump, .lammpstrj, dump.*)");
    }
    if (!hdf5_group.empty() && !fs::is_regular_file(p)) {
      // "x.hdf5#/group" selects a group inside an HDF5 file; a folder has none to select.
      throw Error(ps + ": is " + std::string(fs::is_directory(p) ? "a folder" : "not a regular file") +
                  ", not an HDF5 file, so '#" + hdf5_group + "' (a group inside an HDF5 file) selects nothing" +
                  origin + "; give the folder without '#...', or the HDF5 file");
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
        systems.push_back(open_deepmd_system(d, type_map, keys));
        from_xyz.push_back(false);
      }
    } else if (is_hdf5_path(p)) {
      for (System& s : open_hdf5_systems(ps, hdf5_group, type_map, keys)) {
        systems.push_back(std::move(s));
        from_xyz.push_back(false);
      }
    } else if (is_xyz_path(p)) {
      for (System& s : open_extxyz(ps, type_map, keys)) {
        systems.push_back(std::move(s));
        from_xyz.push_back(true);
      }
    } else if (is_lammps_dump_path(ps)) {
      for (System& s : open_lammps_dump(ps, type_map, keys)) {
        systems.push_back(std::move(s));
        from_xyz.push_back(true);
      }
    } else {
      throw Error(ps + ": not a DeePMD system folder, not an .xyz/.extxyz file, not an .hdf5/.h5 file and not a "
                  "LAMMPS dump (.dump, .lammpstrj, dump.*)" + origin);
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

  for (System& s : systems) {
    if (loading == Loading::kInMemory) s.load_all();
    validate_system(s);
  }
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
  const int nperiodic = s.pbc[0] + s.pbc[1] + s.pbc[2];
  if (nperiodic > 0 && !s.has_box()) {
    throw Error(who + ": periodic (pbc " + std::string(s.pbc[0] ? "T" : "F") +
                (s.pbc[1] ? " T" : " F") + (s.pbc[2] ? " T" : " F") +
                ") but has no cell; expected box.npy / Lattice, or `nopbc` for a cluster");
  }
  if (!s.in_memory()) return;  // streamed: each frame is checked when it is read
  check_size(s.coord, nf * n * 3, "coord", false);
  check_size(s.box, nf * 9, "box", true);
  check_size(s.energy, nf, "energy", true);
  check_size(s.force, nf * n * 3, "force", true);
  check_size(s.virial, nf * 9, "virial", true);
  check_size(s.charge, nf * n, "charge", true);
  for (int64_t f = 0; f < nf; ++f) validate_frame(s, f, s.frame(f));
}

}  // namespace mlip::data
