#include "data/lammps_dump.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string_view>

#include "data/file_identity.h"
#include "error.h"

namespace mlip::data {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

/// The whitespace-separated tokens of a line, as views into it.
std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
    const size_t b = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t' && s[i] != '\r') ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

/// A line quoted in a message, cut to 80 characters.
std::string shown(std::string_view line) {
  std::string s(line.substr(0, 80));
  if (line.size() > 80) s += "...";
  return "'" + s + "'";
}

/// Parses a whole token as a double (a leading '+' allowed); false when it is not a number.
bool parse_double(std::string_view tok, double& v) {
  if (!tok.empty() && tok[0] == '+') tok.remove_prefix(1);
  if (tok.empty()) return false;
  const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  return ec == std::errc() && end == tok.data() + tok.size();
}

/// Parses a whole token as a signed 64-bit integer; false when it is not one.
bool parse_int(std::string_view tok, int64_t& v) {
  if (!tok.empty() && tok[0] == '+') tok.remove_prefix(1);
  if (tok.empty()) return false;
  const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  return ec == std::errc() && end == tok.data() + tok.size();
}

std::string join(const std::vector<std::string>& names, const char* separator = ", ") {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? separator : "") + names[i];
  return s;
}

std::string pbc_string(const std::array<bool, 3>& pbc) {
  std::string s;
  for (bool b : pbc) s += b ? 'T' : 'F';
  return s;
}

/// The lines of a dump, numbered from 1, with the byte offset of the next line.
class Lines {
 public:
  /// `in` positioned at the start of line `first_line`, byte `first_offset` of the file.
  Lines(std::istream& in, int64_t first_line, int64_t first_offset)
      : in_(in), line_no_(first_line - 1), offset_(first_offset) {}

  /// The next line without its line ending; false at the end of the file.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) return false;
    ++line_no_;
    offset_ += int64_t(line.size()) + (in_.eof() ? 0 : 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }
  /// The number of the last line read (0 before the first).
  int64_t line_no() const { return line_no_; }
  /// The byte offset of the line after the last one read.
  int64_t offset() const { return offset_; }

 private:
  std::istream& in_;
  int64_t line_no_;
  int64_t offset_;
};

/// One snapshot as parsed: atoms in id order (file order without an id column).
struct Snapshot {
  int64_t line = 0;        ///< 1-based line number of its first line (ITEM: TIMESTEP, or UNITS / TIME before it)
  int64_t timestep = 0;    ///< the value under ITEM: TIMESTEP
  int64_t count_line = 0;  ///< line number of its atom count (under ITEM: NUMBER OF ATOMS)
  std::vector<std::string> elements;  ///< [natoms] the element column
  std::vector<double> pos;            ///< [natoms * 3] Cartesian positions, Å
  bool has_cell = false;              ///< false when no direction is periodic
  std::array<double, 9> cell{};       ///< rows are the cell vectors, Å
  std::array<bool, 3> pbc{{true, true, true}};
};

/// What parsing a snapshot needs besides its lines.
struct ParseContext {
  std::string path;
  /// Element names an atom may have (the type_map); empty: any.
  const std::vector<std::string>* known = nullptr;
  /// For a first line that is no ITEM line: what the snapshot before said ("" for the first).
  std::string previous;
};

[[noreturn]] void fail(const ParseContext& c, int64_t line, const std::string& what) {
  throw Error(c.path + ":" + std::to_string(line) + ": " + what);
}

/// Reads the next line, which must be `ITEM: <name>...`; returns what follows the name.
/// `after`: why this item is expected, for messages (" after the box bounds of line 5").
std::string expect_item(Lines& in, const ParseContext& c, const std::string& name, const std::string& after = "") {
  std::string line;
  const std::string item = "ITEM: " + name;
  if (!in.next(line)) fail(c, in.line_no() + 1, "expected '" + item + "'" + after + ", got the end of the file");
  const std::string t = trim(line);
  if (t.compare(0, item.size(), item) != 0 ||
      (t.size() > item.size() && t[item.size()] != ' ' && t[item.size()] != '\t'))
    fail(c, in.line_no(), "expected '" + item + "'" + after + ", got " + shown(t));
  return trim(t.substr(item.size()));
}

/// Reads the single value line under `item` (its tokens must be exactly one).
std::string value_line(Lines& in, const ParseContext& c, const std::string& item, const std::string& expected) {
  std::string line;
  if (!in.next(line))
    fail(c, in.line_no() + 1, "expected " + expected + " under 'ITEM: " + item + "', got the end of the file");
  const auto toks = split_ws(line);
  if (toks.size() != 1)
    fail(c, in.line_no(), "expected " + expected + " under 'ITEM: " + item + "', got " + shown(trim(line)));
  return std::string(toks[0]);
}

int64_t integer_line(Lines& in, const ParseContext& c, const std::string& item, const std::string& expected) {
  const std::string v = value_line(in, c, item, expected);
  int64_t out = 0;
  if (!parse_int(v, out))
    fail(c, in.line_no(), "expected " + expected + " under 'ITEM: " + item + "', got " + shown(v));
  return out;
}

/// The box: cell rows, the origin of fractional coordinates, periodicity.
struct Box {
  std::array<double, 9> cell{};
  std::array<double, 3> origin{};
  std::array<bool, 3> pbc{{true, true, true}};
};

/// Reads the three lines after `ITEM: BOX BOUNDS <rest>` (LAMMPS manual, dump command: the
/// orthogonal, restricted triclinic and general triclinic forms).
Box read_box(Lines& in, const ParseContext& c, const std::string& rest) {
  const int64_t item_line = in.line_no();
  std::vector<std::string_view> toks = split_ws(rest);
  enum class Kind { kOrthogonal, kTriclinic, kGeneral } kind = Kind::kOrthogonal;
  if (toks.size() >= 3 && toks[0] == "xy" && toks[1] == "xz" && toks[2] == "yz") {
    kind = Kind::kTriclinic;
    toks.erase(toks.begin(), toks.begin() + 3);
  } else if (toks.size() >= 2 && toks[0] == "abc" && toks[1] == "origin") {
    kind = Kind::kGeneral;
    toks.erase(toks.begin(), toks.begin() + 2);
  }
  Box box;
  auto flag_ok = [](std::string_view f) {
    return f.size() == 2 && std::string("pfsm").find(f[0]) != std::string::npos &&
           std::string("pfsm").find(f[1]) != std::string::npos;
  };
  const bool flags_ok = toks.empty() || (toks.size() == 3 && flag_ok(toks[0]) && flag_ok(toks[1]) && flag_ok(toks[2]));
  if (!flags_ok)
    fail(c, item_line,
         "expected 'ITEM: BOX BOUNDS' followed by three boundary flags, one per direction, of two letters p, f, s or "
         "m ('pp pp pp', 'pp pp fs'), after 'xy xz yz' for a triclinic box or 'abc origin' for a general one; got "
         "'ITEM: BOX BOUNDS " +
             rest + "'");
  for (size_t d = 0; d < toks.size(); ++d) box.pbc[d] = toks[d] == "pp";  // no flags: LAMMPS' default, periodic

  const size_t width = kind == Kind::kOrthogonal ? 2 : kind == Kind::kTriclinic ? 3 : 4;
  const char* form = kind == Kind::kOrthogonal  ? "'lo hi'"
                     : kind == Kind::kTriclinic ? "'lo_bound hi_bound tilt'"
                                                : "'vx vy vz origin'";
  std::array<std::array<double, 4>, 3> v{};
  for (int d = 0; d < 3; ++d) {
    std::string line;
    if (!in.next(line))
      fail(
          c, in.line_no() + 1,
          "expected line " + std::to_string(d + 1) + " of 3 of the box bounds (" + form + "), got the end of the file");
    const auto t = split_ws(line);
    bool ok = t.size() == width;
    for (size_t k = 0; ok && k < width; ++k) ok = parse_double(t[k], v[d][k]) && std::isfinite(v[d][k]);
    if (!ok)
      fail(c, in.line_no(),
           "expected line " + std::to_string(d + 1) + " of 3 of the box bounds under line " +
               std::to_string(item_line) + ": " + std::to_string(width) + " finite numbers " + form + ", got " +
               shown(trim(line)));
  }
  if (kind == Kind::kGeneral) {
    for (int d = 0; d < 3; ++d) {
      for (int k = 0; k < 3; ++k) box.cell[size_t(3 * d + k)] = v[d][size_t(k)];
      box.origin[size_t(d)] = v[d][3];
    }
    return box;
  }
  // Restricted triclinic: the lines hold the bounding box of the tilted cell and the tilts xy,
  // xz, yz (in that order, one a line); the box itself is recovered as the manual gives it.
  const double xy = kind == Kind::kTriclinic ? v[0][2] : 0.0;
  const double xz = kind == Kind::kTriclinic ? v[1][2] : 0.0;
  const double yz = kind == Kind::kTriclinic ? v[2][2] : 0.0;
  const double xlo = v[0][0] - std::min({0.0, xy, xz, xy + xz});
  const double xhi = v[0][1] - std::max({0.0, xy, xz, xy + xz});
  const double ylo = v[1][0] - std::min(0.0, yz);
  const double yhi = v[1][1] - std::max(0.0, yz);
  const double zlo = v[2][0], zhi = v[2][1];
  const double lo[3] = {xlo, ylo, zlo}, hi[3] = {xhi, yhi, zhi};
  for (int d = 0; d < 3; ++d) {
    if (hi[d] < lo[d])
      fail(c, item_line + 1 + d,
           std::string("the box bounds give ") + "xyz"[d] + "hi < " + "xyz"[d] + "lo (" + std::to_string(hi[d]) +
               " < " + std::to_string(lo[d]) + (kind == Kind::kTriclinic ? ", after removing the tilts" : "") +
               "), expected lo <= hi");
  }
  box.cell = {xhi - xlo, 0, 0, xy, yhi - ylo, 0, xz, yz, zhi - zlo};
  box.origin = {xlo, ylo, zlo};
  return box;
}

/// Where the columns mlip reads are in an atom line.
struct AtomColumns {
  int width = 0;  ///< columns in an atom line
  int id = -1;    ///< -1: no id column
  int element = -1;
  std::array<int, 3> pos{{-1, -1, -1}};
  std::array<std::string, 3> pos_names;
  bool scaled = false;  ///< xs ys zs or xsu ysu zsu: fractions of the cell vectors
};

AtomColumns read_columns(const ParseContext& c, int64_t line, const std::string& rest) {
  std::vector<std::string> names;
  for (std::string_view t : split_ws(rest)) names.emplace_back(t);
  if (names.empty()) fail(c, line, "expected the column names after 'ITEM: ATOMS' (id element x y z ...), got none");
  AtomColumns cols;
  cols.width = int(names.size());
  auto find = [&](const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    return it == names.end() ? -1 : int(it - names.begin());
  };
  cols.id = find("id");
  cols.element = find("element");
  if (cols.element < 0) {
    if (find("type") >= 0)
      fail(c, line,
           "the atoms have a 'type' column but no 'element' column (columns: " + join(names, " ") +
               "); mlip needs each atom's element: add `element` to the dump command (dump 1 all custom 100 "
               "traj.dump id element x y z) and `dump_modify <dump id> element <names>` (one element name per atom "
               "type, in type order)");
    fail(c, line,
         "expected an 'element' column in 'ITEM: ATOMS' (dump ... id element x y z, with dump_modify <dump id> "
         "element <names>), got the columns " +
             join(names, " "));
  }
  const std::array<std::array<const char*, 3>, 4> sets = {
      {{"x", "y", "z"}, {"xu", "yu", "zu"}, {"xs", "ys", "zs"}, {"xsu", "ysu", "zsu"}}};
  for (size_t k = 0; k < sets.size(); ++k) {
    const std::array<int, 3> at = {find(sets[k][0]), find(sets[k][1]), find(sets[k][2])};
    const int present = (at[0] >= 0) + (at[1] >= 0) + (at[2] >= 0);
    if (present == 3) {
      cols.pos = at;
      for (int d = 0; d < 3; ++d) cols.pos_names[size_t(d)] = sets[k][size_t(d)];
      cols.scaled = k >= 2;
      return cols;
    }
    if (present > 0) {
      int missing = at[0] < 0 ? 0 : at[1] < 0 ? 1 : 2;
      fail(c, line,
           "the columns have '" +
               std::string(sets[k][at[0] >= 0   ? 0
                                   : at[1] >= 0 ? 1
                                                : 2]) +
               "' but no '" + sets[k][size_t(missing)] + "' column (columns: " + join(names, " ") + "); expected " +
               sets[k][0] + " " + sets[k][1] + " " + sets[k][2]);
    }
  }
  fail(c, line,
       "expected position columns x y z (or xu yu zu, xs ys zs, xsu ysu zsu) in 'ITEM: ATOMS', got the columns " +
           join(names, " "));
}

/// Reads one snapshot into `out`. False when the file has only blank lines left (the end);
/// otherwise the whole snapshot is read and checked, or an Error says what is wrong where.
bool read_snapshot(Lines& in, const ParseContext& c, Snapshot& out) {
  std::string line;
  // The first line: ITEM: UNITS / TIME / TIMESTEP, or the end of the file (blank lines allowed).
  if (!in.next(line)) return false;
  if (trim(line).empty()) {
    const int64_t blank = in.line_no();
    while (in.next(line))
      if (!trim(line).empty())
        fail(c, blank,
             "expected 'ITEM: TIMESTEP' (the start of a snapshot), got an empty line (followed by " +
                 shown(trim(line)) + " at line " + std::to_string(in.line_no()) + ")");
    return false;
  }
  out = Snapshot();
  out.line = in.line_no();
  auto is_item = [&](const std::string& name) {
    const std::string t = trim(line), item = "ITEM: " + name;
    return t == item;
  };
  if (trim(line).rfind("ITEM:", 0) != 0)
    fail(c, in.line_no(), "expected 'ITEM: TIMESTEP' (the start of a snapshot), got " + shown(trim(line)) + c.previous);
  if (is_item("UNITS")) {
    const std::string units = value_line(in, c, "UNITS", "a LAMMPS unit style");
    if (units != "metal" && units != "real")
      fail(c, in.line_no(),
           "units '" + units +
               "': expected metal or real (positions in Å); mlip reads positions in Å: run LAMMPS with units metal");
    if (!in.next(line)) fail(c, in.line_no() + 1, "expected 'ITEM: TIMESTEP', got the end of the file");
  }
  if (is_item("TIME")) {
    const std::string time = value_line(in, c, "TIME", "the simulated time (a number)");
    double t = 0;
    if (!parse_double(time, t))
      fail(c, in.line_no(), "expected the simulated time (a number) under 'ITEM: TIME', got " + shown(time));
    if (!in.next(line)) fail(c, in.line_no() + 1, "expected 'ITEM: TIMESTEP', got the end of the file");
  }
  if (!is_item("TIMESTEP"))
    fail(c, in.line_no(), "expected 'ITEM: TIMESTEP' (the start of a snapshot), got " + shown(trim(line)) + c.previous);
  out.timestep = integer_line(in, c, "TIMESTEP", "the timestep (an integer)");

  expect_item(in, c, "NUMBER OF ATOMS");
  const int64_t natoms = integer_line(in, c, "NUMBER OF ATOMS", "the number of atoms (an integer)");
  const int64_t count_line = in.line_no();
  out.count_line = count_line;
  if (natoms <= 0)
    fail(c, count_line,
         "expected a positive number of atoms under 'ITEM: NUMBER OF ATOMS', got " + std::to_string(natoms));

  const std::string bounds = expect_item(in, c, "BOX BOUNDS");
  const Box box = read_box(in, c, bounds);
  out.pbc = box.pbc;
  out.has_cell = box.pbc[0] || box.pbc[1] || box.pbc[2];  // as extended XYZ: a cell without periodicity plays no role
  out.cell = box.cell;

  const std::string columns_text = expect_item(in, c, "ATOMS", " after the box bounds");
  const AtomColumns cols = read_columns(c, in.line_no(), columns_text);

  // Grown line by line: the atom count may be wrong (or absurd) and must not size allocations.
  const int64_t guess = std::min<int64_t>(natoms, 1 << 16);
  std::vector<int64_t> ids;
  if (cols.id >= 0) ids.reserve(size_t(guess));
  out.elements.reserve(size_t(guess));
  out.pos.reserve(size_t(3 * guess));
  const int64_t first_atom_line = in.line_no() + 1;
  const std::string count_hint =
      " (NUMBER OF ATOMS at line " + std::to_string(count_line) + " says " + std::to_string(natoms) + ")";
  for (int64_t a = 0; a < natoms; ++a) {
    if (!in.next(line))
      fail(c, in.line_no() + 1,
           "expected atom line " + std::to_string(a + 1) + " of " + std::to_string(natoms) +
               ", got the end of the file" + count_hint);
    const auto toks = split_ws(line);
    const bool item = trim(line).rfind("ITEM:", 0) == 0;  // the next snapshot: fewer atoms than declared
    if (item || int(toks.size()) != cols.width) {
      fail(c, in.line_no(),
           "expected atom line " + std::to_string(a + 1) + " of " + std::to_string(natoms) + " with " +
               std::to_string(cols.width) + " values (the columns of 'ITEM: ATOMS' at line " +
               std::to_string(first_atom_line - 1) + "), got " +
               (item ? "" : std::to_string(toks.size()) + " values: ") + shown(trim(line)) + count_hint);
    }
    if (cols.id >= 0) {
      int64_t id = 0;
      if (!parse_int(toks[size_t(cols.id)], id))
        fail(c, in.line_no(), "column 'id': expected an integer atom id, got " + shown(toks[size_t(cols.id)]));
      ids.push_back(id);
    }
    std::string element(toks[size_t(cols.element)]);
    if (c.known && !c.known->empty() && std::find(c.known->begin(), c.known->end(), element) == c.known->end())
      fail(c, in.line_no(),
           "column 'element': element '" + element + "' is not in the type_map [" + join(*c.known) + "]");
    out.elements.push_back(std::move(element));
    std::array<double, 3> p{};
    for (int d = 0; d < 3; ++d) {
      const std::string_view tok = toks[size_t(cols.pos[size_t(d)])];
      const std::string& name = cols.pos_names[size_t(d)];
      if (!parse_double(tok, p[size_t(d)]))
        fail(c, in.line_no(), "column '" + name + "': expected a number, got " + shown(tok));
      if (!std::isfinite(p[size_t(d)]))
        fail(c, in.line_no(),
             "column '" + name + "' is " + shown(tok) + ", expected a finite number (did the MD run blow up?)");
    }
    if (cols.scaled) {
      // Cartesian = origin + fractions · cell (rows are the cell vectors).
      const auto& h = box.cell;
      for (int d = 0; d < 3; ++d)
        out.pos.push_back(box.origin[size_t(d)] + p[0] * h[size_t(d)] + p[1] * h[size_t(3 + d)] +
                          p[2] * h[size_t(6 + d)]);
    } else {
      out.pos.insert(out.pos.end(), p.begin(), p.end());
    }
  }
  if (cols.id >= 0) {
    // Atoms in id order (the dump's order is the ranks' unless `dump_modify sort id`).
    std::vector<int64_t> order(static_cast<size_t>(natoms));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return ids[size_t(x)] < ids[size_t(y)]; });
    for (size_t k = 1; k < order.size(); ++k)
      if (ids[size_t(order[k])] == ids[size_t(order[k - 1])])
        fail(c, first_atom_line + std::max(order[k], order[k - 1]),
             "atom id " + std::to_string(ids[size_t(order[k])]) + " again (first at line " +
                 std::to_string(first_atom_line + std::min(order[k], order[k - 1])) +
                 "), expected each atom once in a snapshot");
    std::vector<std::string> elements(static_cast<size_t>(natoms));
    std::vector<double> pos(static_cast<size_t>(3 * natoms));
    for (size_t k = 0; k < order.size(); ++k) {
      elements[k] = std::move(out.elements[size_t(order[k])]);
      for (size_t d = 0; d < 3; ++d) pos[3 * k + d] = out.pos[3 * size_t(order[k]) + d];
    }
    out.elements.swap(elements);
    out.pos.swap(pos);
  }
  return true;
}

/// Where a snapshot is in the file.
struct SnapshotPlace {
  int64_t offset = 0;    ///< byte offset of its first line
  int64_t length = 0;    ///< its bytes, through the newline of its last atom line
  int64_t line = 0;      ///< 1-based number of its first line
  int64_t timestep = 0;  ///< its ITEM: TIMESTEP
};

/// The snapshot at `place`, parsed again from the file, which must still be the file recorded
/// as `identity` when it was opened.
Snapshot read_snapshot_at(const std::string& path, const FileIdentity& identity, const SnapshotPlace& place,
                          const std::vector<std::string>& names) {
  const OpenedFile file(path, identity);
  std::string text(size_t(place.length), '\0');
  int64_t done = 0;
  while (done < place.length) {
    const ssize_t got = ::pread(file.fd(), text.data() + done, size_t(place.length - done), off_t(place.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw Error(path + ": cannot read at byte " + std::to_string(place.offset + done) + " (" + std::strerror(errno) +
                  ")");
    if (got == 0) break;
    done += got;
  }
  text.resize(size_t(done));
  std::istringstream in(text);
  Lines lines(in, place.line, place.offset);
  ParseContext c{path, &names, ""};
  Snapshot s;
  if (!read_snapshot(lines, c, s))
    throw Error(path + ":" + std::to_string(place.line) +
                ": expected a snapshot, got none (file changed since it was opened?)");
  return s;
}

/// A snapshot's atom types (indices into names) and the stable order that sorts atoms by type.
void snapshot_types(const Snapshot& s, const std::map<std::string, int>& index, const std::string& path,
                    std::vector<int>& types, std::vector<int64_t>& order) {
  const size_t n = s.elements.size();
  types.assign(n, 0);
  for (size_t a = 0; a < n; ++a) {
    const auto it = index.find(s.elements[a]);
    if (it == index.end())
      throw Error(path + ":" + std::to_string(s.line) + ": element '" + s.elements[a] +
                  "' is not among the file's elements (file changed since it was opened?)");
    types[a] = it->second;
  }
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return types[size_t(x)] < types[size_t(y)]; });
}

/// Reads the frames of one composition of a dump when asked for.
class DumpFrameReader : public FrameReader {
 public:
  DumpFrameReader(std::string system, std::string path, FileIdentity identity, std::vector<std::string> names,
                  std::vector<SnapshotPlace> places)
      : system_(std::move(system)),
        path_(std::move(path)),
        identity_(identity),
        names_(std::move(names)),
        places_(std::move(places)) {
    for (size_t i = 0; i < names_.size(); ++i) index_.emplace(names_[i], static_cast<int>(i));
  }

  Frame read(int64_t frame) const override {
    return read_naming_frame(system_, frame, where(frame), [&] {
      if (frame < 0 || frame >= int64_t(places_.size()))
        throw Error("beyond the system's " + std::to_string(places_.size()) + " frames");
      const Snapshot s = read_snapshot_at(path_, identity_, places_[size_t(frame)], names_);
      std::vector<int> types;
      std::vector<int64_t> order;
      snapshot_types(s, index_, path_, types, order);
      Frame out;
      out.coord.resize(3 * order.size());
      for (size_t a = 0; a < order.size(); ++a)
        for (size_t d = 0; d < 3; ++d) out.coord[3 * a + d] = s.pos[3 * size_t(order[a]) + d];
      if (s.has_cell) out.box.assign(s.cell.begin(), s.cell.end());
      return out;
    });
  }

  std::string where(int64_t frame) const override {
    if (frame < 0 || frame >= int64_t(places_.size())) return "";
    const SnapshotPlace& p = places_[size_t(frame)];
    return "line " + std::to_string(p.line) + " of " + path_ + ", timestep " + std::to_string(p.timestep);
  }

 private:
  std::string system_;     ///< the system's name, for messages
  std::string path_;       ///< the dump file
  FileIdentity identity_;  ///< the file as open_lammps_dump read it
  std::vector<std::string> names_;
  std::map<std::string, int> index_;
  std::vector<SnapshotPlace> places_;  ///< [nframes] where each frame of the system is
};

/// What the first pass keeps of a snapshot.
struct SnapshotSummary {
  SnapshotPlace place;
  std::map<std::string, int64_t> counts;  ///< atoms per element
  std::array<bool, 3> pbc{};
  bool has_cell = false;
};

/// Refuses a compressed dump (dump custom/gz, custom/zstd) with a message saying so.
void refuse_compressed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(magic), 4);
  const std::streamsize got = in.gcount();
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b)
    throw Error(path + ": is gzip-compressed (dump custom/gz); expected a text dump: decompress it first (gunzip)");
  if (got >= 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    throw Error(path + ": is zstd-compressed (dump custom/zstd); expected a text dump: decompress it first (unzstd)");
}

}  // namespace

bool is_lammps_dump_path(const std::string& path) {
  const std::string name = lower(std::filesystem::path(path).filename().string());
  auto ends_with = [&](const std::string& suffix) {
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".dump") || ends_with(".lammpstrj") || (name.size() > 5 && name.rfind("dump.", 0) == 0);
}

std::vector<System> open_lammps_dump(const std::string& path, const std::vector<std::string>& type_map,
                                     const LabelKeys& keys) {
  if (!keys.labels_optional)
    throw Error(path +
                ": a LAMMPS dump carries no energy labels (nor forces to train on), so it cannot be "
                "training, validation or test data; commands that only predict read it (mlip model-devi -s " +
                path +
                "); to train on its frames, label them (a DFT code) and give them as extended XYZ or DeePMD npy");
  const FileIdentity identity = OpenedFile(path).identity();  // refuses a FIFO without blocking on it
  refuse_compressed(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");

  // One pass: every snapshot parsed and checked, where it is and what it holds kept.
  std::vector<SnapshotSummary> seen;
  {
    Lines lines(in, 1, 0);
    ParseContext c{path, &type_map, ""};
    Snapshot s;
    while (true) {
      const int64_t offset = lines.offset();
      if (!read_snapshot(lines, c, s)) break;
      SnapshotSummary sum;
      sum.place = {offset, lines.offset() - offset, s.line, s.timestep};
      for (const std::string& e : s.elements) ++sum.counts[e];
      sum.pbc = s.pbc;
      sum.has_cell = s.has_cell;
      seen.push_back(std::move(sum));
      c.previous = " (does the NUMBER OF ATOMS of the snapshot before, " + std::to_string(s.elements.size()) +
                   " at line " + std::to_string(s.count_line) + ", match its atom lines?)";
    }
  }
  if (seen.empty()) throw Error(path + ": no snapshots (an empty LAMMPS dump file)");

  std::vector<std::string> names = type_map;
  if (names.empty()) {
    std::set<std::string> found;
    for (const SnapshotSummary& s : seen)
      for (const auto& [e, n] : s.counts) found.insert(e);
    names.assign(found.begin(), found.end());
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], static_cast<int>(i));

  // Group snapshots by (composition, pbc), in order of first appearance, as extended XYZ does.
  std::vector<System> systems;
  std::vector<std::vector<SnapshotPlace>> places;
  std::map<std::pair<std::vector<int64_t>, std::string>, size_t> group;
  for (const SnapshotSummary& s : seen) {
    std::vector<int64_t> counts(names.size(), 0);
    for (const auto& [e, n] : s.counts) counts[size_t(index.at(e))] += n;  // every element was checked
    const auto key = std::make_pair(counts, pbc_string(s.pbc));
    auto g = group.find(key);
    if (g == group.end()) {
      g = group.emplace(key, systems.size()).first;
      System sys;
      std::string comp;
      for (size_t t = 0; t < names.size(); ++t)
        if (counts[t]) comp += names[t] + std::to_string(counts[t]);
      const std::string pbc = pbc_string(s.pbc);
      sys.name = path + "[" + comp + (pbc == "TTT" ? "" : ",pbc=" + pbc) + "]";
      sys.type_map = names;
      sys.pbc = s.pbc;
      for (size_t t = 0; t < names.size(); ++t) sys.types.insert(sys.types.end(), size_t(counts[t]), int(t));
      sys.has_cell = s.has_cell;
      sys.has_energy = sys.has_force = sys.has_virial = false;
      systems.push_back(std::move(sys));
      places.emplace_back();
    }
    places[g->second].push_back(s.place);
    ++systems[g->second].nframes;
  }
  // A file written while the pass above read it (an MD run still going) would be read on as another.
  check_unchanged(path, identity, regular_file_identity(path));
  for (size_t k = 0; k < systems.size(); ++k)
    systems[k].reader = std::make_shared<DumpFrameReader>(systems[k].name, path, identity, names, std::move(places[k]));
  return systems;
}

std::vector<System> read_lammps_dump(const std::string& path, const std::vector<std::string>& type_map,
                                     const LabelKeys& keys) {
  std::vector<System> systems = open_lammps_dump(path, type_map, keys);
  for (System& s : systems) s.load_all();
  return systems;
}

}  // namespace mlip::data
