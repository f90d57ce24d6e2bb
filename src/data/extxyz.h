#pragma once

#include <string>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Reads an extended XYZ file as ASE writes it: per frame a count line, a comment line with
/// key=value pairs (Lattice="ax ay az bx by bz cx cy cz", Properties=species:S:1:pos:R:3:forces:R:3
/// (or force), energy=..., pbc="T T F", optional virial="9 numbers" or stress), then one line per
/// atom. Frames are grouped into systems by composition and periodicity; within a frame atoms are
/// stably sorted by type so that every frame of a system has the same type order.
///
/// Energy and forces are required (the file is training data), under the names of `keys`
/// (data/label_keys.h; a missing one is an error naming the file, the frame and the keys that
/// are there). type_map as in read_deepmd_system; when empty the sorted element names found in
/// the file are used. Throws mlip::Error naming the file, the line and what was wrong.
std::vector<System> read_extxyz(const std::string& path, const std::vector<std::string>& type_map,
                                const LabelKeys& keys = {});

/// As read_extxyz, in one pass that checks every frame and keeps only where each frame starts
/// (16 bytes a frame); the frames are parsed again when asked for (System::frame, streamed).
std::vector<System> open_extxyz(const std::string& path, const std::vector<std::string>& type_map,
                                const LabelKeys& keys = {});

}  // namespace mlip::data
