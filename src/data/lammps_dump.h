// LAMMPS text dump files (`dump custom ... id element x y z`), the frames an MD run wrote, read
// as systems without labels for the commands that only predict (docs/data.md "LAMMPS dump files").
#pragma once

#include <string>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Whether the file name of `path` marks a LAMMPS text dump: it ends in `.dump` or `.lammpstrj`,
/// or it starts with `dump.` (LAMMPS' own examples: dump.water); letter case is ignored. Only the
/// name is looked at, not the file. load_systems asks this after its HDF5 (.hdf5/.h5) and
/// extended XYZ (.xyz/.extxyz) tests, so `dump.xyz` stays an extended XYZ file.
bool is_lammps_dump_path(const std::string& path);

/// Reads a LAMMPS text dump of style custom (or atom with an element column): snapshots of
///   [ITEM: UNITS / ITEM: TIME,] ITEM: TIMESTEP, ITEM: NUMBER OF ATOMS,
///   ITEM: BOX BOUNDS [xy xz yz | abc origin] <flags>, ITEM: ATOMS <columns>, one line per atom.
/// Columns may come in any order; extra ones (type, fx, vx, c_pe, ...) are ignored. Required: an
/// `element` column (`dump_modify <id> element O H`; a dump with only `type` is an error saying
/// so) and positions, from x y z, else xu yu zu, else xs ys zs, else xsu ysu zsu (fractional,
/// turned into Cartesian Å as origin + fractions · cell). With an `id` column the atoms of a
/// snapshot are put in id order first; then, as in read_extxyz, atoms are stably sorted by type
/// and frames are grouped into systems by composition and periodicity ("traj.dump[O64H128]",
/// ",pbc=TTF" added when not periodic in all three directions).
///
/// Cell (Å, rows are the cell vectors): orthogonal bounds give diag(xhi-xlo, yhi-ylo, zhi-zlo);
/// restricted triclinic bounds (xlo_bound xhi_bound xy / ylo_bound yhi_bound xz / zlo_bound
/// zhi_bound yz) give a = (xhi-xlo, 0, 0), b = (xy, yhi-ylo, 0), c = (xz, yz, zhi-zlo) after the
/// bounding box is turned back into xlo..zhi as the LAMMPS manual gives it (dump command); general
/// triclinic (`abc origin`) gives the rows as written. Positions stay as written (the origin is
/// not subtracted: the neighbour list takes positions anywhere, as for extended XYZ).
/// Periodicity: a direction is periodic when its boundary flag is `pp` (f, s, m: not periodic;
/// no flags, as very old LAMMPS wrote: periodic); a snapshot periodic in no direction has no
/// cell. `ITEM: UNITS` must be metal or real (lengths in Å) when present.
///
/// The frames carry no energy, forces or virial (System::has_energy and has_force false; Frame's
/// label vectors empty), so keys.labels_optional must be set (`mlip model-devi`): otherwise the
/// file is an error saying that a LAMMPS dump carries no energy labels. type_map as in
/// read_extxyz: when empty, the sorted element names found in the file. Frame f's timestep is
/// named in the messages about it (FrameReader::where: "line 57 of traj.dump, timestep 1000").
///
/// One pass checks every snapshot and keeps only where each starts (offset, line, byte length,
/// timestep: 32 bytes a frame); frames are parsed again when asked for (System::frame, streamed),
/// from a file that must not have changed (docs/data.md "Files that change during training").
/// Throws mlip::Error naming the file, the line, what was expected and what was found (a missing
/// ITEM line, a wrong atom count, a missing column, a non-number, an element not in type_map, a
/// non-finite coordinate, a repeated atom id).
std::vector<System> open_lammps_dump(const std::string& path, const std::vector<std::string>& type_map,
                                     const LabelKeys& keys = {});

/// As open_lammps_dump, with every frame read into memory (System::load_all).
std::vector<System> read_lammps_dump(const std::string& path, const std::vector<std::string>& type_map,
                                     const LabelKeys& keys = {});

}  // namespace mlip::data
