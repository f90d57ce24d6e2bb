#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mlip::data {

/// One frame of a system: float64, Å and eV, atoms in the system's order (docs/data.md
/// "Frames read on demand").
struct Frame {
  /// [natoms, 3] positions, Å.
  std::vector<double> coord;
  /// [9] cell, rows are the cell vectors, Å; empty when the system has no cell.
  std::vector<double> box;
  /// [1] total energy, eV; empty when not labelled.
  std::vector<double> energy;
  /// [natoms, 3] forces, eV/Å; empty when not labelled.
  std::vector<double> force;
  /// [9] virial, eV (XX XY XZ YX ...); empty when not labelled.
  std::vector<double> virial;
  /// [natoms] per-atom charges, e (docs/long_range.md "Charge labels"); empty when not labelled.
  std::vector<double> charge;
  /// The frame's weight in the loss (extended XYZ: the key LabelKeys::weight_name(), MACE's
  /// `config_weight`), dimensionless, >= 0; 1 when the file gives none.
  double weight = 1.0;

  /// nullptr when the frame has no cell.
  const double* cell() const { return box.empty() ? nullptr : box.data(); }
};

/// Reads the frames of one system from its files when they are asked for. Thread-safe: read()
/// is called from the trainer's worker threads, and keeps no file open between calls.
class FrameReader {
 public:
  virtual ~FrameReader() = default;
  /// Frame `frame` (0 <= frame < nframes), atoms in the order of the reader's system. Throws
  /// mlip::Error naming the file and the frame when it cannot be read (a file changed since it
  /// was opened: docs/data.md "Files that change during training").
  virtual Frame read(int64_t frame) const = 0;
  /// Where frame `frame` is stored, for messages: "row 12 of data/water/set.000", "line 57 of
  /// x.xyz"; "" when the reader cannot tell.
  virtual std::string where(int64_t frame) const {
    (void)frame;
    return "";
  }
};

/// Runs `read` (the work of a FrameReader::read) and turns whatever it throws into an
/// mlip::Error that names the frame and where it is stored:
/// "<source>: frame <frame> (<place>): <the message>", e.g. "data/water: frame 12 (row 12 of
/// data/water/set.000): data/water/set.000/coord.npy: changed since it was opened at start (...)".
Frame read_naming_frame(const std::string& source, int64_t frame, const std::string& place,
                        const std::function<Frame()>& read);

/// Frames that share one atom count and one per-atom type order (a DeePMD "system").
/// Either in memory (the arrays below hold every frame) or streamed (the arrays are empty and
/// frame() reads through `reader`); load_systems chooses (data/load.h).
struct System {
  /// Where it came from (a folder, "file.xyz[composition]", "file.hdf5#/group"), for messages.
  std::string name;
  /// Type names, indexed by type id (the model's type_map once remapped).
  std::vector<std::string> type_map;
  /// [natoms] type id of each atom, 0 <= id < type_map.size().
  std::vector<int> types;
  /// Periodicity of the three cell directions; all false for DeePMD `nopbc`.
  std::array<bool, 3> pbc{{true, true, true}};
  /// Number of frames.
  int64_t nframes = 0;
  /// Which labels every frame has (known from the files' headers, in memory or not).
  bool has_cell = false, has_energy = false, has_force = false, has_virial = false;
  /// Whether every frame has per-atom charge labels (Frame::charge).
  bool has_charge = false;
  /// The kind of configuration its frames are (extended XYZ: the frames' `config_type` key, as
  /// MACE groups its data; frames of different types are different systems); "Default"
  /// elsewhere. "IsolatedAtom" marks isolated atoms, the reference energies (docs/data.md).
  std::string config_type = "Default";

  /// In memory only: [nframes, natoms, 3] positions, Å.
  std::vector<double> coord;
  /// In memory only: [nframes, 9] cells (empty without a cell).
  std::vector<double> box;
  /// In memory only: [nframes] energies, eV (empty when not labelled).
  std::vector<double> energy;
  /// In memory only: [nframes, natoms, 3] forces, eV/Å (empty when not labelled).
  std::vector<double> force;
  /// In memory only: [nframes, 9] virials, eV (empty when not labelled).
  std::vector<double> virial;
  /// In memory only: [nframes, natoms] charges, e (empty when not labelled).
  std::vector<double> charge;
  /// In memory only: [nframes] frame weights (empty: every weight is 1).
  std::vector<double> weight;

  /// Streamed: where frames come from (shared by copies of the System).
  std::shared_ptr<const FrameReader> reader;
  /// [natoms] atom a of a frame is atom atom_order[a] of the reader's frame (atoms sorted by type
  /// after the type map was extended); empty: the reader's order.
  std::vector<int64_t> atom_order;

  int64_t natoms() const { return static_cast<int64_t>(types.size()); }
  bool has_box() const { return has_cell || !box.empty(); }
  bool in_memory() const { return !coord.empty(); }
  /// In memory only: pointers into the arrays.
  const double* frame_coord(int64_t f) const { return coord.data() + f * natoms() * 3; }
  /// In memory only; nullptr when the system has no cell.
  const double* frame_box(int64_t f) const { return box.empty() ? nullptr : box.data() + f * 9; }

  /// Frame f: a copy from memory, or read through `reader` and checked for non-finite values
  /// (validate_frame; a streamed frame's message then also says where the frame is stored).
  /// Thread-safe.
  Frame frame(int64_t f) const;
  /// Reads every frame through `reader` into the arrays (a streamed system becomes an in-memory
  /// one).
  void load_all();
};

/// Checks one frame for values that would give a silent wrong answer (NaN/Inf, a missing or
/// singular cell in a periodic direction); throws mlip::Error naming the system, the frame and
/// the value.
void validate_frame(const System& system, int64_t index, const Frame& frame);

}  // namespace mlip::data
