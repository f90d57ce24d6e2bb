#include "data/extxyz_writer.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace mlip::data {
namespace {

/// A string value of the comment line as ASE writes one: bare when it is a plain word, else in
/// double quotes with '"' and '\\' escaped (docs/data.md "Predictions as extended XYZ"), so
/// that a config_type with spaces or quotes reads back as written.
std::string comment_value(const std::string& value) {
  const bool plain = !value.empty() && value.find_first_of(" \t\"'{}[]=\\") == std::string::npos;
  if (plain) return value;
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string number(double v, const char* format = "%.12g") {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

std::string numbers(const double* v, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += (k ? " " : "") + number(v[k]);
  return out;
}

double volume(const double* c) {
  return std::abs(c[0] * (c[4] * c[8] - c[5] * c[7]) - c[1] * (c[3] * c[8] - c[5] * c[6]) +
                  c[2] * (c[3] * c[7] - c[4] * c[6]));
}

}  // namespace

std::string extxyz_frame(const System& system, const Frame& frame, const LabelKeys& keys, const std::string& prefix,
                         double energy, const double* forces, const double* virial) {
  const int64_t n = system.natoms();
  const bool labelled_forces = frame.force.size() == size_t(n) * 3;
  const std::string forces_name = keys.forces.empty() ? "forces" : keys.forces;
  std::string text = std::to_string(n) + "\n";
  if (frame.cell() != nullptr) {
    text += "Lattice=\"";
    for (int k = 0; k < 9; ++k) text += (k ? " " : "") + number(frame.box[size_t(k)], "%.10f");
    text += "\" ";
  }
  text += "Properties=species:S:1:pos:R:3" + std::string(labelled_forces ? ":" + forces_name + ":R:3" : "") + ":" +
          prefix + "_forces:R:3";
  if (!frame.energy.empty()) text += " " + keys.energy_name() + "=" + number(frame.energy[0]);
  if (frame.virial.size() == 9) text += " " + keys.virial_name() + "=\"" + numbers(frame.virial.data(), 9) + "\"";
  text += " " + prefix + "_energy=" + number(energy);
  if (virial != nullptr) {
    text += " " + prefix + "_virial=\"" + numbers(virial, 9) + "\"";
    const double v = frame.cell() != nullptr ? volume(frame.cell()) : 0.0;
    if (v != 0.0) {  // a cell without volume (a slab's zero vector) has no stress
      double stress[9];
      for (int k = 0; k < 9; ++k) stress[k] = -virial[k] / v;
      text += " " + prefix + "_stress=\"" + numbers(stress, 9) + "\"";
    }
  }
  text += " config_type=" + comment_value(system.config_type);
  text += std::string(" pbc=\"") + (system.pbc[0] ? "T" : "F") + " " + (system.pbc[1] ? "T" : "F") + " " +
          (system.pbc[2] ? "T" : "F") + "\"\n";
  for (int64_t a = 0; a < n; ++a) {
    text += system.type_map[size_t(system.types[size_t(a)])];
    for (int d = 0; d < 3; ++d) text += " " + number(frame.coord[size_t(a * 3 + d)], "%.10f");
    if (labelled_forces)
      for (int d = 0; d < 3; ++d) text += " " + number(frame.force[size_t(a * 3 + d)]);
    for (int d = 0; d < 3; ++d) text += " " + number(forces[a * 3 + d]);
    text += "\n";
  }
  return text;
}

}  // namespace mlip::data
