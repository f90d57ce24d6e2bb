#include "data/extxyz.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "data/file_identity.h"
#include "data/text_excerpt.h"
#include "error.h"

namespace mlip::data {

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  std::string t;
  while (in >> t) out.push_back(t);
  return out;
}

/// Parses a whole token as a double; false when it is not a number.
bool parse_double(const std::string& tok, double& v) {
  if (tok.empty()) return false;
  std::string t = tok;
  // Fortran-style exponents (1.0D-3).
  for (char& c : t) {
    if (c == 'd' || c == 'D') c = 'e';
  }
  const char* begin = t.c_str();
  char* end = nullptr;
  errno = 0;
  v = std::strtod(begin, &end);
  return end != begin && *end == '\0';
}

/// One key=value pair of the comment line. `quoted` tells whether the value was in quotes.
struct KeyValue {
  std::string value;
  bool quoted = false;
};

/// Splits an extxyz comment line into key=value pairs as ASE's key_val_str_to_dict does:
/// values may be "double quoted" (with \" escapes), {braced} or bare; a bare key means True.
std::map<std::string, KeyValue> parse_comment(const std::string& line, const std::string& where) {
  std::map<std::string, KeyValue> kv;
  size_t i = 0;
  const size_t n = line.size();
  auto skip_ws = [&]() {
    while (i < n && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  };
  while (true) {
    skip_ws();
    if (i >= n) break;
    size_t start = i;
    while (i < n && line[i] != '=' && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    std::string key = line.substr(start, i - start);
    skip_ws();
    KeyValue value;
    if (i < n && line[i] == '=') {
      ++i;
      skip_ws();
      if (i < n && line[i] == '"') {
        ++i;
        std::string v;
        bool closed = false;
        while (i < n) {
          if (line[i] == '\\' && i + 1 < n) {
            v.push_back(line[i + 1]);
            i += 2;
            continue;
          }
          if (line[i] == '"') {
            closed = true;
            ++i;
            break;
          }
          v.push_back(line[i++]);
        }
        if (!closed) {
          throw Error(where + ": key '" + excerpt(key) + "': unterminated quoted value (missing '\"')");
        }
        value.value = v;
        value.quoted = true;
      } else if (i < n && line[i] == '{') {
        size_t close = line.find('}', i);
        if (close == std::string::npos) {
          throw Error(where + ": key '" + excerpt(key) + "': unterminated {} value (missing '}')");
        }
        value.value = line.substr(i + 1, close - i - 1);
        value.quoted = true;
        i = close + 1;
      } else {
        size_t vs = i;
        while (i < n && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
        value.value = line.substr(vs, i - vs);
      }
    } else {
      value.value = "T";
    }
    if (key.empty()) {
      throw Error(where + ": expected key=value pairs in the comment line, got a value without "
                          "a key near '" + excerpt(line.substr(start, 20)) + "'");
    }
    kv[key] = value;
  }
  return kv;
}

std::vector<double> parse_numbers(const std::string& text, const std::string& key,
                                  const std::string& where, size_t expected_a, size_t expected_b) {
  std::string t = text;
  for (char& c : t) {
    if (c == ',' || c == '[' || c == ']' || c == '(' || c == ')') c = ' ';
  }
  std::vector<double> out;
  for (const std::string& tok : split_ws(t)) {
    double v;
    if (!parse_double(tok, v)) {
      throw Error(where + ": key '" + excerpt(key) + "': expected numbers, got '" + excerpt(text) + "'");
    }
    out.push_back(v);
  }
  if (out.size() != expected_a && out.size() != expected_b) {
    std::string exp = std::to_string(expected_a);
    if (expected_b != expected_a) exp += " or " + std::to_string(expected_b);
    throw Error(where + ": key '" + excerpt(key) + "': expected " + exp + " numbers, got " +
                std::to_string(out.size()) + " ('" + excerpt(text) + "')");
  }
  return out;
}

bool parse_bool(const std::string& tok, bool& v) {
  static const std::set<std::string> yes = {"T", "t", "True", "true", "TRUE", "1"};
  static const std::set<std::string> no = {"F", "f", "False", "false", "FALSE", "0"};
  if (yes.count(tok)) {
    v = true;
    return true;
  }
  if (no.count(tok)) {
    v = false;
    return true;
  }
  return false;
}

struct Column {
  std::string name;
  char type = 'R';
  int count = 1;
  int offset = 0;  ///< first token index in an atom line
};

/// One frame as read, before grouping.
struct XyzFrame {
  int64_t line = 0;  ///< 1-based line number of the count line
  std::vector<std::string> elements;
  std::vector<double> pos, force;
  std::vector<double> charge;  ///< [natoms] e; empty without a charges column
  bool has_cell = false;
  std::array<double, 9> cell{};
  std::array<bool, 3> pbc{{false, false, false}};
  double energy = 0;
  bool has_energy = true, has_force = true;  ///< false only with LabelKeys::labels_optional
  bool has_virial = false;
  std::array<double, 9> virial{};
  std::string config_type = "Default";  ///< the `config_type` key
  double weight = 1.0;                  ///< the weight key (LabelKeys::weight_name())
};

std::string pbc_string(const std::array<bool, 3>& pbc) {
  std::string s;
  for (bool b : pbc) s += b ? 'T' : 'F';
  return s;
}

double det3(const std::array<double, 9>& m) {
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
         m[2] * (m[3] * m[7] - m[4] * m[6]);
}

/// The keys of a comment line, for messages: "Lattice, Properties, REF_energy, pbc".
std::string key_list(const std::map<std::string, KeyValue>& kv) {
  std::string out;
  for (const auto& [key, value] : kv) out += (out.empty() ? "" : ", ") + excerpt(key);
  return out.empty() ? "none" : out;
}

/// The comment line's key=value pairs (parse_comment).
using CommentKeys = std::map<std::string, KeyValue>;

/// The columns of a Properties value (name:type:count triplets, e.g. "species:S:1:pos:R:3"),
/// each with its first token index in an atom line. `where` names the comment line in messages.
std::vector<Column> parse_properties(const std::string& props, const std::string& where) {
  std::vector<std::string> parts;
  {
    std::string cur;
    for (char c : props) {
      if (c == ':') {
        parts.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(c);
      }
    }
    parts.push_back(cur);
  }
  if (parts.size() % 3 != 0) {
    throw Error(where + ": key 'Properties': expected name:type:count triplets, got '" + excerpt(props) +
                "'");
  }
  std::vector<Column> columns;
  int ncols = 0;
  for (size_t k = 0; k < parts.size(); k += 3) {
    Column c;
    c.name = parts[k];
    const std::string& type = parts[k + 1];
    if (type.size() != 1 || std::string("RISL").find(type[0]) == std::string::npos) {
      throw Error(where + ": key 'Properties': column '" + c.name + "' has type '" + type +
                  "', expected one of R, I, S, L");
    }
    c.type = type[0];
    const std::string& cnt = parts[k + 2];
    if (cnt.empty() || cnt.size() > 6 || cnt.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(cnt) < 1) {
      throw Error(where + ": key 'Properties': column '" + c.name + "' has count '" + cnt +
                  "', expected a positive integer");
    }
    c.count = std::stoi(cnt);
    c.offset = ncols;
    ncols += c.count;
    columns.push_back(c);
  }
  return columns;
}

/// The columns of a frame's atom lines that mlip reads.
struct AtomColumns {
  std::string properties;  ///< the Properties value (default "species:S:1:pos:R:3"), for messages
  std::vector<Column> all;
  int width = 0;           ///< tokens per atom line
  Column species, pos;
  const Column* force = nullptr;  ///< into `all`; nullptr when the frame has no forces column
  const Column* charge = nullptr;  ///< into `all`; nullptr when the frame has no charges column
  std::string names;              ///< the column names, for messages: "species, pos, forces"

  AtomColumns() = default;
  AtomColumns(const AtomColumns&) = delete;  // `force` and `charge` point into `all`
  AtomColumns& operator=(const AtomColumns&) = delete;
};

/// The first column named by one of `names` (in that order of preference), or nullptr.
const Column* find_column(const std::vector<Column>& columns, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    for (const Column& c : columns) {
      if (c.name == name) return &c;
    }
  }
  return nullptr;
}

/// Reads the Properties key into `out`: a species:S:1 and a pos:R:3 column are required; the
/// forces column (keys.forces, else forces or force) is found but checked later (check_forces);
/// the charges column (keys.charges, else REF_charges or charges) must be R:1 where there is one.
void read_atom_columns(const CommentKeys& kv, const LabelKeys& keys, const std::string& where, AtomColumns& out) {
  out.properties = kv.count("Properties") ? kv.at("Properties").value : "species:S:1:pos:R:3";
  out.all = parse_properties(out.properties, where);
  for (const Column& c : out.all) out.width += c.count;
  const Column* species = find_column(out.all, {"species"});
  const Column* pos = find_column(out.all, {"pos", "positions"});
  out.force = keys.forces.empty() ? find_column(out.all, {"forces", "force"}) : find_column(out.all, {keys.forces.c_str()});
  if (!species || species->type != 'S' || species->count != 1) {
    throw Error(where + ": key 'Properties': expected a species:S:1 column, got '" + excerpt(out.properties) + "'");
  }
  if (!pos || pos->type != 'R' || pos->count != 3) {
    throw Error(where + ": key 'Properties': expected a pos:R:3 column, got '" + excerpt(out.properties) + "'");
  }
  out.charge = keys.charges.empty() ? find_column(out.all, {"REF_charges", "charges"})
                                    : find_column(out.all, {keys.charges.c_str()});
  if (out.charge && (out.charge->type != 'R' || out.charge->count != 1)) {
    throw Error(where + ": key 'Properties': expected the charges column '" + out.charge->name +
                "' of type R and count 1 (one charge per atom, e), got '" + excerpt(out.properties) + "'");
  }
  out.species = *species;
  out.pos = *pos;
  for (const Column& c : out.all) out.names += (out.names.empty() ? "" : ", ") + c.name;
  if (!keys.charges.empty() && !out.charge && !keys.labels_optional) {
    throw Error(where + ": no charges: expected a column '" + keys.charges +
                "' (charges_key) of type R and count 1 in Properties; the columns are " + out.names);
  }
}

/// The frame's energy, eV, from the comment key keys.energy (else energy or free_energy).
/// no_forces_too: the frame lacks forces it needs as well, which the message then says.
/// `which` (" (frame 3)" or "") follows `where` in the message of a missing energy.
double read_energy(const CommentKeys& kv, const LabelKeys& keys, const AtomColumns& columns, bool no_forces_too,
                   const std::string& where, const std::string& which) {
  const std::string energy_key = !keys.energy.empty()     ? keys.energy
                                 : kv.count("energy")      ? "energy"
                                 : kv.count("free_energy") ? "free_energy"
                                                           : "";
  if (energy_key.empty() || kv.count(energy_key) == 0) {
    throw Error(where + which + ": no energy" + (!no_forces_too ? "" : " and no forces") + ": expected the key " +
                (keys.energy.empty() ? "'energy' (or 'free_energy')" : "'" + keys.energy + "' (energy_key)") +
                " in the comment line; its keys are " + key_list(kv) +
                (!no_forces_too ? "" : "; and a column " + std::string(keys.forces.empty() ? "'forces'" : "'" + keys.forces + "'") +
                                  " in Properties, whose columns are " + columns.names) +
                (keys.energy.empty() ? " (for labels under other names: energy_key, forces_key in the data section, "
                                       "or --energy-key, --forces-key)"
                                     : ""));
  }
  double energy = 0;
  const std::string& ev = kv.at(energy_key).value;
  if (!parse_double(trim(ev), energy)) {
    throw Error(where + ": key '" + energy_key + "': expected a number, got '" + excerpt(ev) + "'");
  }
  return energy;
}

/// A frame needs a forces column of type R and count 3, unless it is `isolated` (its forces are
/// zero then).
void check_forces(const AtomColumns& columns, bool isolated, const LabelKeys& keys, const std::string& where,
                  const std::string& which) {
  const Column* force = columns.force;
  if (!force && !isolated) {
    throw Error(where + which + ": no forces: expected a column " +
                (keys.forces.empty() ? "'forces' (or 'force')" : "'" + keys.forces + "' (forces_key)") +
                " of type R and count 3 in Properties; the columns are " + columns.names +
                (keys.forces.empty() ? " (for forces under another name: forces_key in the data section, or --forces-key)" : ""));
  }
  if (force && (force->type != 'R' || force->count != 3)) {
    throw Error(where + ": key 'Properties': expected column '" + force->name +
                "' of type R and count 3, got '" + excerpt(columns.properties) + "'");
  }
}

/// Reads the Lattice and pbc keys into fr.cell, fr.has_cell and fr.pbc (pbc defaults to "T T T"
/// with a Lattice, else "F F F"; a cell without periodicity is dropped).
void read_cell_and_pbc(const CommentKeys& kv, const std::string& where, XyzFrame& fr) {
  if (kv.count("Lattice")) {
    std::vector<double> c = parse_numbers(kv.at("Lattice").value, "Lattice", where, 9, 9);
    std::copy(c.begin(), c.end(), fr.cell.begin());
    fr.has_cell = true;
  }
  if (kv.count("pbc")) {
    const std::string& pv = kv.at("pbc").value;
    std::vector<std::string> toks = split_ws(pv);
    bool ok = toks.size() == 3;
    for (size_t d = 0; ok && d < 3; ++d) {
      bool b = false;
      ok = parse_bool(toks[d], b);
      fr.pbc[d] = b;
    }
    if (!ok) {
      throw Error(where + ": key 'pbc': expected three of T/F (e.g. pbc=\"T T T\"), got '" + excerpt(pv) +
                  "'");
    }
  } else {
    fr.pbc = {fr.has_cell, fr.has_cell, fr.has_cell};
  }
  const bool periodic = fr.pbc[0] || fr.pbc[1] || fr.pbc[2];
  if (periodic && !fr.has_cell) {
    throw Error(where + ": key 'pbc' is \"" + kv.at("pbc").value +
                "\" (periodic) but there is no Lattice key; a periodic frame needs "
                "Lattice=\"ax ay az bx by bz cx cy cz\"");
  }
  if (!periodic) fr.has_cell = false;  // a cell without periodicity plays no role
}

/// Reads the virial (eV, 9 numbers) into fr.virial and fr.has_virial: given directly, or from the
/// stress (eV/Å³, 9 numbers or 6 in Voigt order) as virial = -stress * volume.
void read_virial(const CommentKeys& kv, const LabelKeys& keys, const std::string& where, XyzFrame& fr) {
  const std::string virial_key = keys.virial_name(), stress_key = keys.stress_name();
  if (kv.count(virial_key)) {
    std::vector<double> v = parse_numbers(kv.at(virial_key).value, virial_key, where, 9, 9);
    std::copy(v.begin(), v.end(), fr.virial.begin());
    fr.has_virial = true;
  } else if (kv.count(stress_key)) {
    std::vector<double> s = parse_numbers(kv.at(stress_key).value, stress_key, where, 9, 6);
    if (s.size() == 6) {  // Voigt order xx yy zz yz xz xy
      s = {s[0], s[5], s[4], s[5], s[1], s[3], s[4], s[3], s[2]};
    }
    if (!kv.count("Lattice")) {
      throw Error(where + ": key '" + stress_key + "' given but no Lattice: the virial (-stress * volume) "
                          "needs the cell volume");
    }
    std::array<double, 9> cell{};
    std::vector<double> c = parse_numbers(kv.at("Lattice").value, "Lattice", where, 9, 9);
    std::copy(c.begin(), c.end(), cell.begin());
    const double volume = std::abs(det3(cell));
    // A cell with a zero (or coplanar) vector, as ASE writes for a slab with pbc "T T F", has no
    // volume: its virial would be zero whatever the stress, a silently wrong label.
    double lengths = 1.0;
    for (int d = 0; d < 3; ++d) {
      const double* a = &cell[size_t(3 * d)];
      lengths *= std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
    }
    if (!(volume > 1e-9 * lengths))
      throw Error(where + ": key '" + stress_key + "' given but the Lattice \"" + excerpt(kv.at("Lattice").value) +
                  "\" has no volume (a zero or flat cell vector, as for a slab with pbc \"T T F\"): the virial "
                  "(-stress * volume) needs a three-dimensional cell; give the virial (key '" + virial_key +
                  "', eV) instead, or leave the stress out");
    for (int k = 0; k < 9; ++k) fr.virial[k] = -s[k] * volume;
    fr.has_virial = true;
  }
}

/// Reads what kind of configuration the frame is (config_type) and its weight in the loss
/// (keys.weight_name(), >= 0): MACE's keys.
void read_config_type_and_weight(const CommentKeys& kv, const LabelKeys& keys, const std::string& where,
                                 XyzFrame& fr) {
  if (kv.count("config_type")) {
    fr.config_type = trim(kv.at("config_type").value);
    if (fr.config_type.empty() || fr.config_type.find_first_of(",[]") != std::string::npos)
      throw Error(where + ": key 'config_type': expected a name without ',', '[' or ']', got '" + excerpt(fr.config_type) + "'");
  }
  const std::string weight_key = keys.weight_name();
  if (kv.count(weight_key)) {
    const std::string& wv = kv.at(weight_key).value;
    if (!parse_double(trim(wv), fr.weight) || !std::isfinite(fr.weight) || fr.weight < 0)
      throw Error(where + ": key '" + weight_key + "': expected a number >= 0 (the frame's weight), got '" + excerpt(wv) + "'");
  }
}

/// Reads the frame's natoms atom lines into fr.elements, fr.pos [natoms * 3] Å, fr.force
/// [natoms * 3] eV/Å (zero without a forces column) and fr.charge [natoms] e (with a charges
/// column). line_no: the last line read, advanced.
void read_atom_lines(std::istream& in, const std::string& path, int64_t& line_no, int64_t natoms, int64_t count_line,
                     const AtomColumns& columns, XyzFrame& fr) {
  // Grown line by line: the count line may be wrong (or absurd) and must not size allocations.
  const int64_t guess = std::min<int64_t>(natoms, 1 << 16);
  fr.elements.reserve(guess);
  fr.pos.reserve(3 * guess);
  fr.force.reserve(3 * guess);
  for (int64_t a = 0; a < natoms; ++a) {
    std::string line;
    if (!std::getline(in, line)) {
      throw Error(path + ":" + std::to_string(count_line) + ": atom count line says " +
                  std::to_string(natoms) + " atoms but the file ends after " + std::to_string(a) +
                  " atom lines");
    }
    ++line_no;
    const std::string aw = path + ":" + std::to_string(line_no);
    std::vector<std::string> toks = split_ws(line);
    if (static_cast<int>(toks.size()) != columns.width) {
      throw Error(aw + ": atom " + std::to_string(a) + ": expected " + std::to_string(columns.width) +
                  " columns (Properties=" + columns.properties + "), got " + std::to_string(toks.size()) +
                  " ('" + trim(line) + "'); does the atom count line (" +
                  std::to_string(natoms) + " at line " + std::to_string(count_line) +
                  ") match the frame?");
    }
    fr.elements.push_back(toks[columns.species.offset]);
    fr.pos.resize(3 * (a + 1));
    fr.force.resize(3 * (a + 1));
    auto read3 = [&](const Column& c, double* out) {
      for (int d = 0; d < 3; ++d) {
        const std::string& tok = toks[c.offset + d];
        if (!parse_double(tok, out[d])) {
          throw Error(aw + ": atom " + std::to_string(a) + ": column '" + c.name +
                      "': expected a number, got '" + excerpt(tok) + "'");
        }
      }
    };
    read3(columns.pos, &fr.pos[3 * a]);
    if (columns.force) read3(*columns.force, &fr.force[3 * a]);
    else std::fill(fr.force.begin() + 3 * a, fr.force.end(), 0.0);
    if (columns.charge) {
      const std::string& tok = toks[size_t(columns.charge->offset)];
      double q = 0;
      if (!parse_double(tok, q))
        throw Error(aw + ": atom " + std::to_string(a) + ": column '" + columns.charge->name +
                    "': expected a number, got '" + excerpt(tok) + "'");
      fr.charge.push_back(q);
    }
  }
}

/// Reads one frame after its atom count line (line count_line, natoms atoms): the comment line
/// and the atom lines. line_no: the last line read, advanced past the frame.
/// frame: its index in the file (0-based), for messages; -1 when not known.
XyzFrame read_frame(std::istream& in, const std::string& path, int64_t& line_no, int64_t natoms,
                 int64_t count_line, const LabelKeys& keys, int64_t frame) {
  XyzFrame fr;
  fr.line = count_line;
  std::string comment;
  if (!std::getline(in, comment)) {
    throw Error(path + ":" + std::to_string(count_line) +
                ": frame declares " + std::to_string(natoms) +
                " atoms but the file ends before its comment line");
  }
  ++line_no;
  const std::string where = path + ":" + std::to_string(line_no);
  const std::string which = frame >= 0 ? " (frame " + std::to_string(frame) + ")" : "";
  const CommentKeys kv = parse_comment(comment, where);
  AtomColumns columns;
  read_atom_columns(kv, keys, where, columns);
  // An isolated atom (MACE's config_type=IsolatedAtom), or any one-atom frame, needs no forces:
  // they are zero (a lone atom's energy does not change when it moves, periodic or not).
  const bool isolated =
      natoms == 1 || (kv.count("config_type") != 0 && trim(kv.at("config_type").value) == "IsolatedAtom");
  if (keys.labels_optional) {
    // Frames to predict on: labels are read where they are, never required.
    fr.has_energy = kv.count(keys.energy_name()) != 0 || (keys.energy.empty() && kv.count("free_energy") != 0);
    if (fr.has_energy) fr.energy = read_energy(kv, keys, columns, false, where, which);
    fr.has_force = columns.force != nullptr;
  } else {
    fr.energy = read_energy(kv, keys, columns, !columns.force && !isolated, where, which);
    check_forces(columns, isolated, keys, where, which);
  }
  read_cell_and_pbc(kv, where, fr);
  read_virial(kv, keys, where, fr);
  read_config_type_and_weight(kv, keys, where, fr);
  read_atom_lines(in, path, line_no, natoms, count_line, columns, fr);
  return fr;
}

/// Where a frame starts in the file.
struct FramePlace {
  std::streamoff offset = 0;  ///< byte offset of its atom count line
  int64_t line = 0;           ///< 1-based line number of that line
};

/// A frame's atom types (indices into `index`'s names) and the stable order that sorts them.
void frame_types(const XyzFrame& f, const std::map<std::string, int>& index, const std::vector<std::string>& names,
                 const std::string& path, std::vector<int>& types, std::vector<int64_t>& order) {
  const int64_t natoms = static_cast<int64_t>(f.elements.size());
  types.assign(size_t(natoms), 0);
  for (int64_t a = 0; a < natoms; ++a) {
    auto it = index.find(f.elements[size_t(a)]);
    if (it == index.end()) {
      throw Error(path + ":" + std::to_string(f.line) + ": atom " + std::to_string(a) + ": element '" +
                  f.elements[size_t(a)] + "' is not in the type_map " + join_names(names));
    }
    types[size_t(a)] = it->second;
  }
  order.resize(size_t(natoms));
  for (int64_t a = 0; a < natoms; ++a) order[size_t(a)] = a;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return types[size_t(x)] < types[size_t(y)]; });
}

/// The frame at `place`, parsed again from the file, which must still be the file recorded as
/// `identity` when it was opened (check_unchanged).
XyzFrame read_frame_at(const std::string& path, const FileIdentity& identity, const FramePlace& place,
                       const LabelKeys& keys) {
  const OpenedFile file(path, identity);
  // The frame's text: its count line, comment line and atom lines, read from its offset in
  // chunks until they are all in (or the file ends: read_frame then says what is missing).
  std::string text;
  int64_t natoms = -1;  // from the count line, once read; 0 when it is not a number
  int64_t newlines = 0;
  std::vector<char> chunk(size_t(1) << 16);
  off_t at = off_t(place.offset);
  while (natoms < 0 || newlines < natoms + 2) {
    const ssize_t got = ::pread(file.fd(), chunk.data(), chunk.size(), at);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(path + ": cannot read at byte " + std::to_string(at) + " (" + std::strerror(errno) + ")");
    if (got == 0) break;
    newlines += std::count(chunk.begin(), chunk.begin() + got, '\n');
    text.append(chunk.data(), size_t(got));
    at += got;
    const size_t end = text.find('\n');
    if (natoms < 0 && end != std::string::npos) {
      const std::string t = trim(text.substr(0, end));
      const bool number = !t.empty() && t.size() <= 12 && t.find_first_not_of("0123456789") == std::string::npos;
      natoms = number ? std::stoll(t) : 0;
    }
  }
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":" + std::to_string(place.line) + ": cannot read the frame (file changed since it was opened?)");
  const std::string t = trim(line);
  if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos)
    throw Error(path + ":" + std::to_string(place.line) + ": expected the atom count of a frame, got '" + excerpt(t) +
                "' (file changed since it was opened?)");
  int64_t line_no = place.line;
  return read_frame(in, path, line_no, std::stoll(t), place.line, keys, -1);
}

/// Reads the frames of one composition of an extended XYZ file when asked for.
class ExtxyzFrameReader : public FrameReader {
 public:
  ExtxyzFrameReader(std::string system, std::string path, FileIdentity identity, std::vector<std::string> names,
                    std::vector<FramePlace> places, bool virial, bool charge, LabelKeys keys)
      : system_(std::move(system)), path_(std::move(path)), identity_(identity), names_(std::move(names)),
        places_(std::move(places)), virial_(virial), charge_(charge), keys_(std::move(keys)) {
    for (size_t i = 0; i < names_.size(); ++i) index_.emplace(names_[i], static_cast<int>(i));
  }

  data::Frame read(int64_t frame) const override {
    return read_naming_frame(system_, frame, where(frame), [&] {
      if (frame < 0 || frame >= int64_t(places_.size()))
        throw Error("beyond the system's " + std::to_string(places_.size()) + " frames");
      return read_at(places_[size_t(frame)]);
    });
  }

  std::string where(int64_t frame) const override {
    if (frame < 0 || frame >= int64_t(places_.size())) return "";
    return "line " + std::to_string(places_[size_t(frame)].line) + " of " + path_;
  }

 private:
  data::Frame read_at(const FramePlace& place) const {
    const XyzFrame f = read_frame_at(path_, identity_, place, keys_);
    std::vector<int> types;
    std::vector<int64_t> order;
    frame_types(f, index_, names_, path_, types, order);
    data::Frame out;
    const size_t n = order.size();
    out.coord.resize(3 * n);
    if (f.has_force) out.force.resize(3 * n);
    if (charge_) {
      if (f.charge.size() != n) throw Error("the frame has no charges column (file changed since it was opened?)");
      out.charge.resize(n);
      for (size_t a = 0; a < n; ++a) out.charge[a] = f.charge[size_t(order[a])];
    }
    for (size_t a = 0; a < n; ++a)
      for (size_t d = 0; d < 3; ++d) {
        out.coord[3 * a + d] = f.pos[3 * size_t(order[a]) + d];
        if (f.has_force) out.force[3 * a + d] = f.force[3 * size_t(order[a]) + d];
      }
    if (f.has_cell) out.box.assign(f.cell.begin(), f.cell.end());
    if (f.has_energy) out.energy = {f.energy};
    if (virial_) out.virial.assign(f.virial.begin(), f.virial.end());
    out.weight = f.weight;
    return out;
  }

 private:
  std::string system_;  ///< the system's name, for messages
  std::string path_;
  FileIdentity identity_;  ///< the file as open_extxyz read it
  std::vector<std::string> names_;
  std::map<std::string, int> index_;
  std::vector<FramePlace> places_;
  bool virial_;
  bool charge_;  ///< the system has charge labels (every frame has the column)
  LabelKeys keys_;
};


/// What the first pass over the file keeps of a frame: where it starts and what it holds.
struct FrameSummary {
  FramePlace place;
  std::map<std::string, int64_t> counts;  ///< atoms per element
  std::array<bool, 3> pbc{};
  bool has_cell = false, has_virial = false;
  bool has_energy = true, has_force = true;
  bool has_charge = false;
  std::string config_type;
};

/// One pass over the open file `in`: where each frame starts and what it holds (its element
/// counts, periodicity, cell, virial); the coordinates are parsed (so every error is found now)
/// but not kept. Only blank lines may follow the last frame; a file without frames is an error.
std::vector<FrameSummary> scan_frames(std::istream& in, const std::string& path, const LabelKeys& keys) {
  std::vector<FrameSummary> seen;
  std::string line;
  int64_t line_no = 0;
  while (true) {
    const std::streamoff offset = in.tellg();
    if (!std::getline(in, line)) break;
    ++line_no;
    const std::string t = trim(line);
    if (t.empty()) {
      // Only blank lines may follow the last frame.
      std::string rest;
      int64_t blank_line = line_no;
      while (std::getline(in, rest)) {
        ++line_no;
        if (!trim(rest).empty()) {
          throw Error(path + ":" + std::to_string(blank_line) +
                      ": expected the atom count of a frame, got an empty line (a frame's atom "
                      "count line may not match its atom lines)");
        }
      }
      break;
    }
    bool ok = t.size() <= 12 && t.find_first_not_of("0123456789") == std::string::npos;
    if (!ok) {
      throw Error(path + ":" + std::to_string(line_no) +
                  ": expected the atom count of a frame (an integer), got '" + excerpt(t) +
                  "'" + (seen.empty() ? "" : " (the previous frame's atom count may be wrong)"));
    }
    const int64_t natoms = std::stoll(t);
    if (natoms == 0) {
      throw Error(path + ":" + std::to_string(line_no) + ": frame with 0 atoms");
    }
    FrameSummary s;
    s.place = {offset, line_no};
    const XyzFrame f = read_frame(in, path, line_no, natoms, line_no, keys, int64_t(seen.size()));
    for (const std::string& e : f.elements) ++s.counts[e];
    s.pbc = f.pbc;
    s.has_cell = f.has_cell;
    s.has_virial = f.has_virial;
    s.has_energy = f.has_energy, s.has_force = f.has_force;
    s.has_charge = !f.charge.empty();
    s.config_type = f.config_type;
    seen.push_back(std::move(s));
  }
  if (seen.empty()) throw Error(path + ": no frames (empty extended XYZ file)");
  return seen;
}

/// The type names: type_map when given, else every element of the file in name order.
std::vector<std::string> type_names(const std::vector<FrameSummary>& seen, const std::vector<std::string>& type_map) {
  if (!type_map.empty()) return type_map;
  std::set<std::string> found;
  for (const FrameSummary& f : seen)
    for (const auto& [e, n] : f.counts) found.insert(e);
  return {found.begin(), found.end()};
}

/// The frame's atoms per type (of names; index maps a name to its type). An element not in
/// names is an error naming the frame's first atom of it (the frame is parsed again for that).
std::vector<int64_t> composition(const FrameSummary& f, const std::vector<std::string>& names,
                                 const std::map<std::string, int>& index, const std::string& path,
                                 const FileIdentity& identity, const LabelKeys& keys) {
  std::vector<int64_t> counts(names.size(), 0);
  for (const auto& [e, n] : f.counts) {
    auto it = index.find(e);
    if (it == index.end()) {
      // Parse the frame again for the message naming the first atom of that element.
      const XyzFrame fr = read_frame_at(path, identity, f.place, keys);
      std::vector<int> types;
      std::vector<int64_t> order;
      frame_types(fr, index, names, path, types, order);
    }
    counts[size_t(it->second)] += n;
  }
  return counts;
}

/// A new system (no frames yet) for frames like f with `counts` atoms per type: named
/// "<path>[H2O1]" plus ",pbc=TTF" and ",config_type=..." when not the defaults.
System new_system(const std::string& path, const std::vector<std::string>& names, const std::vector<int64_t>& counts,
                  const FrameSummary& f) {
  System s;
  std::string comp;
  for (size_t t = 0; t < names.size(); ++t) {
    if (counts[t]) comp += names[t] + std::to_string(counts[t]);
  }
  const std::string pbc = pbc_string(f.pbc);
  s.name = path + "[" + comp + (pbc == "TTT" ? "" : ",pbc=" + pbc) +
           (f.config_type == "Default" ? "" : ",config_type=" + f.config_type) + "]";
  s.config_type = f.config_type;
  s.type_map = names;
  s.pbc = f.pbc;
  for (size_t t = 0; t < names.size(); ++t) s.types.insert(s.types.end(), size_t(counts[t]), int(t));
  s.has_energy = s.has_force = true;
  s.has_virial = f.has_virial;
  s.has_charge = true;  // until a frame without charges joins (open_extxyz)
  return s;
}
}  // namespace

std::vector<System> open_extxyz(const std::string& path, const std::vector<std::string>& type_map,
                                const LabelKeys& keys) {
  const FileIdentity identity = OpenedFile(path).identity();  // refuses a FIFO without blocking on it
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  const std::vector<FrameSummary> seen = scan_frames(in, path, keys);
  const std::vector<std::string> names = type_names(seen, type_map);
  std::map<std::string, int> index;
  for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], static_cast<int>(i));

  // Group frames by (composition, pbc, config_type), in order of first appearance.
  std::vector<System> systems;
  std::vector<std::vector<FramePlace>> places;
  std::map<std::pair<std::vector<int64_t>, std::string>, size_t> group;
  std::vector<int64_t> first_line;  // per system: line of its first frame
  for (const FrameSummary& f : seen) {
    const std::vector<int64_t> counts = composition(f, names, index, path, identity, keys);
    auto key = std::make_pair(counts, pbc_string(f.pbc) + "|" + f.config_type);
    auto g = group.find(key);
    if (g == group.end()) {
      g = group.emplace(key, systems.size()).first;
      systems.push_back(new_system(path, names, counts, f));
      places.emplace_back();
      first_line.push_back(f.place.line);
    }
    System& s = systems[g->second];
    const bool first_frame = s.nframes == 0;
    if (!first_frame && f.has_virial != s.has_virial) {
      throw Error(path + ":" + std::to_string(f.place.line) + ": frame " +
                  (f.has_virial ? "has" : "has no") + " virial/stress but the first frame of "
                  "its system (line " + std::to_string(first_line[g->second]) + ") " +
                  (f.has_virial ? "has none" : "has one") +
                  "; label every frame of a composition or none");
    }
    s.has_cell = s.has_cell || f.has_cell;
    s.has_energy = s.has_energy && f.has_energy, s.has_force = s.has_force && f.has_force;
    // Charges are a label of the system when every frame has them (docs/long_range.md "Charge
    // labels"; a named charges_key is checked on every frame as it is read).
    s.has_charge = s.has_charge && f.has_charge;
    places[g->second].push_back(f.place);
    ++s.nframes;
  }
  // A file written while the pass above read it would be read on as another.
  check_unchanged(path, identity, regular_file_identity(path));
  for (size_t k = 0; k < systems.size(); ++k)
    systems[k].reader = std::make_shared<ExtxyzFrameReader>(systems[k].name, path, identity, names,
                                                            std::move(places[k]), systems[k].has_virial,
                                                            systems[k].has_charge, keys);
  return systems;
}

std::vector<System> read_extxyz(const std::string& path, const std::vector<std::string>& type_map,
                                const LabelKeys& keys) {
  std::vector<System> systems = open_extxyz(path, type_map, keys);
  for (System& s : systems) s.load_all();
  return systems;
}

}  // namespace mlip::data
