#include "data/system.h"

#include <cmath>
#include <new>
#include <sstream>

#include "data/overlap.h"
#include "error.h"

namespace mlip::data {

namespace {

std::string vec_string(const double* v, int n) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < n; ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

const char* nan_or_inf(double v) { return std::isnan(v) ? "NaN" : "Inf"; }

void check_cell(const System& s, const std::string& frame, const double* b) {
  const int nperiodic = s.pbc[0] + s.pbc[1] + s.pbc[2];
  if (nperiodic == 0) return;
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
    const int d0 = s.pbc[0] ? 0 : 1;
    const int d1 = s.pbc[2] ? 2 : 1;
    const double* u = b + 3 * d0;
    const double* v = b + 3 * d1;
    const double cx = u[1] * v[2] - u[2] * v[1];
    const double cy = u[2] * v[0] - u[0] * v[2];
    const double cz = u[0] * v[1] - u[1] * v[0];
    measure = std::sqrt(cx * cx + cy * cy + cz * cz);
    what = "area spanned by the periodic cell vectors";
  } else {
    return;  // one periodic direction: a non-zero vector suffices
  }
  if (std::abs(measure) < 1e-10) {
    std::ostringstream m;
    m << frame << ": singular cell " << vec_string(b, 9) << ": " << what << " is " << measure
      << ", expected |" << what << "| >= 1e-10";
    throw Error(m.str());
  }
}

/// Two atoms on top of each other (or one on a periodic image of the other) give every model a
/// non-finite energy (docs/data.md "Overlapping atoms"): an error naming the atoms in the
/// file's order.
void check_no_overlap(const System& s, const std::string& frame, const Frame& fr) {
  if (fr.coord.empty()) return;
  const auto overlap = find_overlap(fr.coord.data(), s.natoms(), fr.cell(), s.pbc);
  if (!overlap) return;
  auto file_index = [&](int64_t a) { return s.atom_order.empty() ? a : s.atom_order[size_t(a)]; };
  int64_t i = file_index(overlap->i), j = file_index(overlap->j);
  std::array<int, 3> shift = overlap->shift;
  if (i > j) {
    std::swap(i, j);
    for (int& c : shift) c = -c;
  }
  std::ostringstream m;
  m << frame << ": atoms " << i << " and " << j << " (counting from 0, in the file's order) are " << overlap->distance
    << " Å apart";
  if (shift != std::array<int, 3>{{0, 0, 0}})
    m << " (atom " << j << " shifted by [" << shift[0] << ", " << shift[1] << ", " << shift[2] << "] cell vectors)";
  m << ", expected at least " << kOverlapDistance << " Å: atoms on top of each other have no finite energy; "
    << "remove the frame or correct its positions";
  throw Error(m.str());
}

}  // namespace

void validate_frame(const System& s, int64_t index, const Frame& fr) {
  static const char* kAxis = "xyz";
  const std::string frame = "system " + s.name + ": frame " + std::to_string(index);
  // [natoms, 3] values (coordinates, forces): the first non-finite one, by atom and axis.
  auto check_atoms = [&](const std::vector<double>& values, const char* what) {
    for (int64_t a = 0; a < int64_t(values.size()) / 3; ++a)
      for (int d = 0; d < 3; ++d) {
        const double v = values[size_t(a * 3 + d)];
        if (!std::isfinite(v))
          throw Error(frame + ", atom " + std::to_string(a) + ": " + what + " " + kAxis[d] + " is " + nan_or_inf(v) +
                      ", expected a finite number");
      }
  };
  check_atoms(fr.coord, "coordinate");
  check_atoms(fr.force, "force");
  for (size_t a = 0; a < fr.charge.size(); ++a)
    if (!std::isfinite(fr.charge[a]))
      throw Error(frame + ", atom " + std::to_string(a) + ": charge is " + nan_or_inf(fr.charge[a]) +
                  ", expected a finite number");
  if (!fr.energy.empty() && !std::isfinite(fr.energy[0])) {
    throw Error(frame + ": energy is " + nan_or_inf(fr.energy[0]) + ", expected a finite number");
  }
  if (!fr.virial.empty()) {
    for (int k = 0; k < 9; ++k) {
      const double v = fr.virial[size_t(k)];
      if (!std::isfinite(v)) {
        throw Error(frame + ": virial component " + std::to_string(k) + " is " + nan_or_inf(v) +
                    ", expected a finite number");
      }
    }
  }
  if (!fr.box.empty()) {
    for (int k = 0; k < 9; ++k) {
      if (!std::isfinite(fr.box[size_t(k)])) {
        throw Error(frame + ": cell " + vec_string(fr.box.data(), 9) + " has a non-finite component " +
                    std::to_string(k) + ", expected finite numbers");
      }
    }
    check_cell(s, frame, fr.box.data());
  }
  check_no_overlap(s, frame, fr);
}

Frame read_naming_frame(const std::string& source, int64_t frame, const std::string& place,
                        const std::function<Frame()>& read) {
  const auto named = [&](const std::string& message) {
    return Error(source + ": frame " + std::to_string(frame) + (place.empty() ? "" : " (" + place + ")") + ": " +
                 message);
  };
  try {
    return read();
  } catch (const std::bad_alloc&) {
    throw named("out of memory while reading the frame");
  } catch (const std::exception& e) {
    throw named(e.what());
  }
}

Frame System::frame(int64_t f) const {
  if (f < 0 || f >= nframes) throw Error(name + ": frame " + std::to_string(f) + " out of range [0, " +
                                         std::to_string(nframes) + ")");
  Frame out;
  const size_t n3 = size_t(natoms()) * 3;
  if (in_memory()) {
    auto slice = [&](const std::vector<double>& v, size_t per, std::vector<double>& to) {
      if (!v.empty()) to.assign(v.begin() + long(size_t(f) * per), v.begin() + long(size_t(f + 1) * per));
    };
    slice(coord, n3, out.coord);
    slice(box, 9, out.box);
    slice(energy, 1, out.energy);
    slice(force, n3, out.force);
    slice(virial, 9, out.virial);
    slice(charge, size_t(natoms()), out.charge);
    if (!weight.empty()) out.weight = weight[size_t(f)];
    return out;  // checked when the system was loaded
  }
  if (!reader) throw Error(name + ": has neither frames in memory nor a reader");
  out = reader->read(f);
  if (out.coord.size() != size_t(natoms()) * 3 || (!out.force.empty() && out.force.size() != out.coord.size()) ||
      (!out.charge.empty() && out.charge.size() != size_t(natoms())))
    throw Error(name + ": frame " + std::to_string(f) + (reader->where(f).empty() ? "" : " (" + reader->where(f) + ")") +
                ": read " + std::to_string(out.coord.size() / 3) + " atoms, expected " + std::to_string(natoms()) +
                " (file changed since it was opened?)");
  if (!atom_order.empty()) {
    auto permute = [&](std::vector<double>& v) {
      if (v.empty()) return;
      std::vector<double> p(v.size());
      for (size_t a = 0; a < atom_order.size(); ++a)
        for (size_t d = 0; d < 3; ++d) p[a * 3 + d] = v[size_t(atom_order[a]) * 3 + d];
      v.swap(p);
    };
    permute(out.coord);
    permute(out.force);
    if (!out.charge.empty()) {
      std::vector<double> p(out.charge.size());
      for (size_t a = 0; a < atom_order.size(); ++a) p[a] = out.charge[size_t(atom_order[a])];
      out.charge.swap(p);
    }
  }
  try {
    validate_frame(*this, f, out);
  } catch (const Error& e) {
    const std::string place = reader->where(f);
    if (place.empty()) throw;
    throw Error(std::string(e.what()) + " (frame " + std::to_string(f) + " is " + place + ")");
  }
  return out;
}

void System::load_all() {
  if (in_memory() || nframes == 0) return;
  std::vector<double> c, b, e, fo, v, q, w;
  bool weighted = false;
  for (int64_t f = 0; f < nframes; ++f) {
    Frame fr = frame(f);
    w.push_back(fr.weight);
    weighted = weighted || fr.weight != 1.0;
    c.insert(c.end(), fr.coord.begin(), fr.coord.end());
    b.insert(b.end(), fr.box.begin(), fr.box.end());
    e.insert(e.end(), fr.energy.begin(), fr.energy.end());
    fo.insert(fo.end(), fr.force.begin(), fr.force.end());
    v.insert(v.end(), fr.virial.begin(), fr.virial.end());
    q.insert(q.end(), fr.charge.begin(), fr.charge.end());
  }
  coord.swap(c), box.swap(b), energy.swap(e), force.swap(fo), virial.swap(v), charge.swap(q);
  if (weighted) weight.swap(w);
  atom_order.clear();
}

}  // namespace mlip::data
