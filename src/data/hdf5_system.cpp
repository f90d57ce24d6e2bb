#include "data/hdf5_system.h"

#include "error.h"

#ifdef MLIP_HAVE_HDF5

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <memory>
#include <mutex>
#include <cstring>
#include <sstream>

#include "data/deepmd_layout.h"
#include "data/file_identity.h"
#include "data/npy.h"

namespace mlip::data {

namespace {

/// The HDF5 library of Debian is built without thread safety: every call holds this lock.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

/// Owns an HDF5 identifier and closes it with the matching function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

/// HDF5 prints its own error stack on failures unless told not to; mlip reports its own.
void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string join_path(const std::string& group, const std::string& name) {
  return group == "/" ? "/" + name : group + "/" + name;
}

/// "file.hdf5#/group/name": how messages name a dataset or group.
std::string where(const std::string& file, const std::string& object) { return file + "#" + object; }

/// Opens `file` read-only. `at_start`: the file as it was first opened (nullptr at that first
/// open); a file that is no longer that one is an error naming it (check_unchanged). `identity`
/// receives the identity of the descriptor HDF5 opened. A FIFO or device is refused before
/// HDF5 opens it (it would block).
Handle open_file(const std::string& file, const FileIdentity* at_start = nullptr, FileIdentity* identity = nullptr) {
  silence_hdf5();
  if (at_start == nullptr && !std::filesystem::exists(file)) throw Error(file + ": no such file");
  // First a descriptor of mlip's own, opened without blocking: a file that is not the one seen
  // at start, or not a regular file (a FIFO would block HDF5's open), is refused here.
  const FileIdentity on_disk =
      at_start != nullptr ? OpenedFile(file, *at_start).identity() : OpenedFile(file).identity();
  if (at_start == nullptr && H5Fis_hdf5(file.c_str()) <= 0)
    throw Error(file + ": not an HDF5 file (no HDF5 signature; truncated or another format?)");
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) throw Error(file + ": cannot open as HDF5 (damaged or truncated file?)");
  // The file HDF5 opened may not be the one stat saw a moment before: ask its descriptor.
  FileIdentity opened = on_disk;
  Handle access(H5Fget_access_plist(f.get()), H5Pclose);
  void* handle = nullptr;
  if (access.valid() && H5Pget_driver(access.get()) == H5FD_SEC2 &&
      H5Fget_vfd_handle(f.get(), H5P_DEFAULT, &handle) >= 0 && handle != nullptr)
    opened = identity_of(*static_cast<int*>(handle), file);
  if (at_start != nullptr) check_unchanged(file, *at_start, opened);
  if (identity != nullptr) *identity = opened;
  return f;
}

bool link_exists(hid_t loc, const std::string& path) {
  // Every component must exist for H5Lexists to be asked about the next one.
  std::string partial;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    partial += "/" + part;
    if (H5Lexists(loc, partial.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

bool is_group(hid_t file, const std::string& path) {
  if (path != "/" && !link_exists(file, path)) return false;
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  if (H5Oget_info_by_name3(file, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return false;
#else
  if (H5Oget_info_by_name(file, path.c_str(), &info, H5P_DEFAULT) < 0) return false;
#endif
  return info.type == H5O_TYPE_GROUP;
}

/// The names of the links in a group, sorted.
std::vector<std::string> children(hid_t file, const std::string& group) {
  std::vector<std::string> names;
  H5Literate_by_name(
      file, group.c_str(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names, H5P_DEFAULT);
  std::sort(names.begin(), names.end());
  return names;
}

/// A dataset's shape, class (float or integer or string) and size, checked to be readable.
struct DatasetInfo {
  std::vector<int64_t> shape;
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t type_size = 0;
};

std::string dtype_name(const DatasetInfo& info) {
  switch (info.type_class) {
    case H5T_FLOAT: return "float" + std::to_string(8 * info.type_size);
    case H5T_INTEGER: return "int" + std::to_string(8 * info.type_size);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "class " + std::to_string(int(info.type_class));
  }
}

/// The data a dataset declares must be in the file (checked before anything is allocated for
/// it): a truncated file holds the header but not the values, and a shape declared far beyond
/// what was written (never-written storage reads as fill values) would be read as data or make
/// mlip allocate for frames that do not exist. Contiguous data must end within the file;
/// chunked data must have every chunk stored (compressed chunks are taken as they are).
void check_stored(hid_t d, const std::string& file_name, const std::string& path, const DatasetInfo& info,
                  const std::vector<hsize_t>& dims) {
  const std::string name = where(file_name, path);
  hsize_t count = 1;
  bool overflow = false;
  for (hsize_t x : dims) {
    if (x != 0 && count > std::numeric_limits<hsize_t>::max() / 16 / x) overflow = true;
    count *= x;
  }
  if (overflow) throw Error(name + ": declared shape " + shape_string(info.shape) + " is too large");
  if (count == 0) return;
  const hsize_t needed = count * info.type_size;
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(file_name, ec);
  const std::string file_note = ec ? "" : "; the file has " + std::to_string(file_size) + " bytes";
  const std::string declared = name + ": declares shape " + shape_string(info.shape) + " (" +
                               std::to_string(needed) + " bytes of " + dtype_name(info) + ")";
  Handle plist(H5Dget_create_plist(d), H5Pclose);
  if (!plist.valid()) throw Error(name + ": cannot read how its data is stored (damaged file?)");
  if (H5Pget_external_count(plist.get()) > 0) return;  // in other files, which HDF5 reads itself
  const H5D_layout_t layout = H5Pget_layout(plist.get());
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t offset = H5Dget_offset(d);
    if (offset == HADDR_UNDEF)
      throw Error(declared + " but none of it is stored in the file" + file_note +
                  " (written without its data, or damaged?)");
    if (!ec && offset + needed > file_size)
      throw Error(name + ": truncated: its " + std::to_string(needed) + " bytes of data end at byte " +
                  std::to_string(offset + needed) + " but the file has " + std::to_string(file_size) + " bytes");
  } else if (layout == H5D_CHUNKED) {
    const int rank = int(dims.size());
    std::vector<hsize_t> chunk(dims.size(), 1);
    if (rank == 0 || H5Pget_chunk(plist.get(), rank, chunk.data()) != rank)
      throw Error(name + ": cannot read its chunk shape (damaged file?)");
    double expected = 1;  // chunks that cover the shape (a double: a declared shape may be absurd)
    for (int k = 0; k < rank; ++k) expected *= double((dims[size_t(k)] + chunk[size_t(k)] - 1) / std::max<hsize_t>(chunk[size_t(k)], 1));
    // Chunks stored (none at all when nothing was ever written: no chunk index either).
    hsize_t stored = 0;
    Handle space(H5Dget_space(d), H5Sclose);
    if (H5Dget_storage_size(d) > 0 && H5Dget_num_chunks(d, space.get(), &stored) < 0)
      throw Error(name + ": cannot count its stored chunks (damaged file?)");
    if (double(stored) < expected) {
      std::ostringstream m;
      m << declared << " in " << std::setprecision(15) << expected << " chunks, but only " << stored
        << " of them are stored in the file" << file_note << " (written without all its data, or damaged?)";
      throw Error(m.str());
    }
  }
}

DatasetInfo inspect(hid_t file, const std::string& file_name, const std::string& path) {
  Handle d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(where(file_name, path) + ": not a dataset (expected a dataset as dpdata writes it)");
  Handle space(H5Dget_space(d.get()), H5Sclose);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  DatasetInfo info;
  const int nd = H5Sget_simple_extent_ndims(space.get());
  if (nd < 0) throw Error(where(file_name, path) + ": cannot read its shape (damaged file?)");
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  // An empty (null) dataspace holds no value: shape [0].
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) dims = {0};
  for (hsize_t x : dims) info.shape.push_back(int64_t(x));
  info.type_class = H5Tget_class(type.get());
  info.type_size = H5Tget_size(type.get());
  check_stored(d.get(), file_name, path, info, dims);
  return info;
}


void expect_float(const DatasetInfo& info, const std::string& name) {
  if (info.type_class != H5T_FLOAT || (info.type_size != 4 && info.type_size != 8))
    throw Error(name + ": unsupported dtype " + dtype_name(info) + " (expected float32 or float64)");
}

/// Rows [first, first + count) of a dataset as float64 (HDF5 converts float32).
std::vector<double> read_rows(hid_t file, const std::string& file_name, const std::string& path,
                              const std::vector<int64_t>& shape, int64_t first, int64_t count) {
  Handle d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(where(file_name, path) + ": cannot open the dataset (file changed since it was opened?)");
  int64_t row = 1;
  for (size_t k = 1; k < shape.size(); ++k) row *= shape[k];
  std::vector<double> out(size_t(count * row));
  Handle file_space(H5Dget_space(d.get()), H5Sclose);
  herr_t status = 0;
  if (shape.empty()) {
    status = H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  } else {
    std::vector<hsize_t> start(shape.size(), 0), extent(shape.begin(), shape.end());
    start[0] = hsize_t(first);
    extent[0] = hsize_t(count);
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr);
    Handle memory_space(H5Screate_simple(int(extent.size()), extent.data(), nullptr), H5Sclose);
    status = H5Dread(d.get(), H5T_NATIVE_DOUBLE, memory_space.get(), file_space.get(), H5P_DEFAULT, out.data());
  }
  if (status < 0) throw Error(where(file_name, path) + ": cannot read rows " + std::to_string(first) + " to " +
                              std::to_string(first + count - 1) + " (damaged file?)");
  return out;
}

/// A string dataset's strings (fixed or variable length, ASCII or UTF-8; a scalar gives one
/// string; an empty dataset none).
std::vector<std::string> read_strings(hid_t file, const std::string& file_name, const std::string& path) {
  const std::string name = where(file_name, path);
  const DatasetInfo info = inspect(file, file_name, path);  // the strings are in the file
  if (info.type_class != H5T_STRING) throw Error(name + ": expected strings, got " + dtype_name(info));
  Handle d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<std::string> out;
  if (n <= 0 || H5Sget_simple_extent_type(space.get()) == H5S_NULL) return out;
  if (H5Tis_variable_str(type.get()) > 0) {
    // The memory type must name the file's character set: HDF5 converts no UTF-8 to ASCII.
    Handle memory_type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory_type.get(), H5T_VARIABLE);
    H5Tset_cset(memory_type.get(), H5Tget_cset(type.get()));
    std::vector<char*> values(static_cast<size_t>(n), nullptr);
    if (H5Dread(d.get(), memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
      throw Error(name + ": cannot read its variable-length strings (damaged file?)");
    for (char* v : values) out.emplace_back(v != nullptr ? v : "");
    H5Dvlen_reclaim(memory_type.get(), space.get(), H5P_DEFAULT, values.data());
  } else {
    const size_t size = H5Tget_size(type.get());
    std::vector<char> buffer(size_t(n) * size);
    if (H5Dread(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
      throw Error(name + ": cannot read its strings (damaged file?)");
    for (hssize_t k = 0; k < n; ++k) {
      const char* begin = buffer.data() + size_t(k) * size;
      out.emplace_back(begin, strnlen(begin, size));
    }
  }
  return out;
}

/// type.raw as integers: an integer dataset, or a string of whitespace-separated integers.
std::vector<int> read_type_ids(hid_t file, const std::string& file_name, const std::string& path) {
  const DatasetInfo info = inspect(file, file_name, path);
  const std::string name = where(file_name, path);
  std::vector<int> ids;
  if (info.type_class == H5T_INTEGER) {
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    if (info.shape.size() > 1) throw Error(name + ": expected shape [natoms], got " + shape_string(info.shape));
    Handle d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
    std::vector<long long> values(static_cast<size_t>(n));
    if (n > 0 && H5Dread(d.get(), H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
      throw Error(name + ": cannot read (damaged file?)");
    for (size_t a = 0; a < values.size(); ++a) {
      if (values[a] < 0 || values[a] > 1000000000)
        throw Error(name + ": expected a non-negative integer type id for atom " + std::to_string(a) + ", got " +
                    std::to_string(values[a]));
      ids.push_back(int(values[a]));
    }
  } else if (info.type_class == H5T_STRING) {
    // Text of integers: one string, or one string per atom (or any split of the text).
    const std::vector<std::string> strings = read_strings(file, file_name, path);
    if (strings.empty())
      throw Error(name + ": expected text of integer type ids (one per atom), got an empty string dataset (shape " +
                  shape_string(info.shape) + ")");
    std::string text;
    for (const std::string& part : strings) text += part + " ";
    std::istringstream in(text);
    std::string tok;
    while (in >> tok) {
      if (tok.size() > 9 || tok.find_first_not_of("0123456789") != std::string::npos)
        throw Error(name + ": expected a non-negative integer type id for atom " + std::to_string(ids.size()) +
                    ", got '" + tok + "'");
      ids.push_back(std::stoi(tok));
    }
  } else {
    throw Error(name + ": unsupported dtype " + dtype_name(info) + " (expected integers, or text of integers)");
  }
  if (ids.empty()) throw Error(name + ": expected one integer type id per atom, got none");
  return ids;
}

}  // namespace

}  // namespace mlip::data

namespace mlip::data {

namespace {

/// The shapes of the datasets of each set, indexed by set and SetArray (empty where absent).
using SetShapes = std::vector<std::array<std::vector<int64_t>, kSetArrays>>;

/// A DeePMD system group of an open HDF5 file, for open_deepmd_layout; keeps the shapes of the
/// datasets it opens (frames are read later with an open of their own).
class Hdf5Storage : public DeepmdStorage {
 public:
  Hdf5Storage(hid_t h, std::string file, std::string group) : h_(h), file_(std::move(file)), group_(std::move(group)) {}

  std::string root() const override { return group_; }
  std::string join(const std::string& parent, const std::string& name) const override { return join_path(parent, name); }
  std::string where(const std::string& path) const override { return data::where(file_, path); }
  bool exists(const std::string& path) const override { return link_exists(h_, path); }

  std::vector<std::string> set_names() const override {
    std::vector<std::string> sets;
    for (const std::string& c : children(h_, group_))
      if (c.rfind("set.", 0) == 0 && is_group(h_, join_path(group_, c))) sets.push_back(c);
    return sets;
  }

  std::vector<int> read_type_ids(const std::string& path) const override {
    return data::read_type_ids(h_, file_, path);
  }

  std::vector<std::string> read_type_names(const std::string& path) const override {
    std::vector<std::string> names;
    for (const std::string& line : read_strings(h_, file_, path)) {
      std::istringstream in(line);
      std::string name;
      while (in >> name) names.push_back(name);
    }
    return names;
  }

  std::vector<int64_t> open_array(size_t set, SetArray which, const std::string& path) override {
    const DatasetInfo info = inspect(h_, file_, path);
    expect_float(info, where(path));
    if (shapes_.size() <= set) shapes_.resize(set + 1);
    shapes_[set][size_t(which)] = info.shape;
    return info.shape;
  }

  std::string container() const override { return "group"; }
  std::string without_box() const override { return "the system group has 'nopbc'"; }

  /// The shapes of the datasets opened so far, moved out.
  SetShapes take_shapes() { return std::move(shapes_); }

 private:
  hid_t h_;
  std::string file_, group_;
  SetShapes shapes_;
};

/// Reads frames of one system of an HDF5 file: opens the file for each frame (no handle is
/// kept between calls) and reads each array's rows of that frame.
class Hdf5FrameReader : public FrameReader {
 public:
  Hdf5FrameReader(std::string system, std::string file, FileIdentity identity, DeepmdLayout layout, SetShapes shapes)
      : system_(std::move(system)), file_(std::move(file)), identity_(identity), layout_(std::move(layout)),
        shapes_(std::move(shapes)) {}

  Frame read(int64_t frame) const override {
    return read_naming_frame(system_, frame, where(frame), [&] {
      const auto [s, f] = layout_.locate(frame);
      if (s == shapes_.size()) throw Error("beyond the system's frames");
      std::lock_guard<std::mutex> lock(hdf5_mutex());
      Handle h = open_file(file_, &identity_);
      return layout_.read_frame([&, s = s, f = f](SetArray which, int64_t per_frame) {
        const std::vector<int64_t>& shape = shapes_[s][size_t(which)];
        const std::string path = join_path(layout_.set_paths[s], layout_.array_name(which));
        // A single frame stored flat, or a 0-d energy: the whole dataset is the frame.
        if (shape.size() <= 1 && per_frame != 1)
          return read_rows(h.get(), file_, path, shape, 0, shape.empty() ? 1 : shape[0]);
        if (shape.empty()) return read_rows(h.get(), file_, path, shape, 0, 1);
        return read_rows(h.get(), file_, path, shape, f, 1);
      });
    });
  }

  std::string where(int64_t frame) const override {
    const auto [s, f] = layout_.locate(frame);
    if (s == shapes_.size()) return "";
    return "row " + std::to_string(f) + " of " + data::where(file_, layout_.set_paths[s]);
  }

 private:
  std::string system_;     ///< the system's name, for messages
  std::string file_;
  FileIdentity identity_;  ///< the file as it was when the system was opened
  DeepmdLayout layout_;
  SetShapes shapes_;
};

/// The DeePMD system in `group` of the open file h (file: its name, identity: the file as
/// opened), as open_hdf5_systems describes.
System open_system(hid_t h, const std::string& file, const FileIdentity& identity, const std::string& group,
                   const std::vector<std::string>& type_map, const LabelKeys& keys) {
  Hdf5Storage storage(h, file, group);
  System sys;
  DeepmdLayout layout = open_deepmd_layout(storage, type_map, keys, sys);
  sys.reader = std::make_shared<Hdf5FrameReader>(sys.name, file, identity, std::move(layout), storage.take_shapes());
  return sys;
}

/// What tells HDF5 objects apart within one file (its address; a token since HDF5 1.12): two
/// paths to one group give the same key.
std::string object_key(hid_t file, const std::string& path) {
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  if (H5Oget_info_by_name3(file, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return path;
  return std::string(reinterpret_cast<const char*>(&info.token), sizeof info.token);
#else
  if (H5Oget_info_by_name(file, path.c_str(), &info, H5P_DEFAULT) < 0) return path;
  return std::string(reinterpret_cast<const char*>(&info.addr), sizeof info.addr);
#endif
}

/// A group on the way down from where the search started: its path and object_key.
struct Ancestor {
  std::string path, key;
};

/// Groups at or under `group` that hold type.raw, in name order (a system's own groups are not
/// searched further). A link back to a group on the way down (a group that holds itself, by a
/// hard or soft link) is an error: the groups would go on for ever.
void find_systems(hid_t h, const std::string& file, const std::string& group, std::vector<Ancestor>& path,
                  std::vector<std::string>& out) {
  if (link_exists(h, join_path(group, "type.raw"))) {
    out.push_back(group);
    return;
  }
  const std::string key = object_key(h, group);
  for (const Ancestor& a : path)
    if (a.key == key)
      throw Error(where(file, group) + ": is the group " + a.path +
                  " again (a link to a group that holds it: a cycle); expected groups that form a tree");
  if (path.size() > 64)
    throw Error(where(file, group) + ": groups nested more than 64 deep; expected system groups (type.raw, set.*) "
                "at most 64 groups below the root");
  path.push_back({group, key});
  for (const std::string& c : children(h, group))
    if (is_group(h, join_path(group, c))) find_systems(h, file, join_path(group, c), path, out);
  path.pop_back();
}

}  // namespace

bool hdf5_available() { return true; }

std::vector<System> open_hdf5_systems(const std::string& file, const std::string& group_given,
                                      const std::vector<std::string>& type_map, const LabelKeys& keys) {
  std::string group = group_given.empty() ? "/" : group_given;
  if (group[0] != '/') group = "/" + group;
  while (group.size() > 1 && group.back() == '/') group.pop_back();
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  FileIdentity identity;
  Handle h = open_file(file, nullptr, &identity);
  if (!is_group(h.get(), group))
    throw Error(where(file, group) + ": no such group in the file (expected a group holding type.raw and set.*)");
  std::vector<std::string> groups;
  std::vector<Ancestor> ancestors;
  find_systems(h.get(), file, group, ancestors, groups);
  if (groups.empty())
    throw Error(where(file, group) + ": no DeePMD system found: no type.raw in this group or any group under it");
  std::vector<System> systems;
  for (const std::string& g : groups) systems.push_back(open_system(h.get(), file, identity, g, type_map, keys));
  return systems;
}

}  // namespace mlip::data

#else  // no HDF5 in this build

namespace mlip::data {

bool hdf5_available() { return false; }

std::vector<System> open_hdf5_systems(const std::string& file, const std::string&, const std::vector<std::string>&,
                                      const LabelKeys&) {
  throw Error(file + ": this build of mlip reads no HDF5 files (configured without the HDF5 C library: install "
              "libhdf5-dev and configure again with -DMLIP_HDF5=ON)");
}

}  // namespace mlip::data

#endif
