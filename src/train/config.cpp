#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "error.h"

namespace fs = std::filesystem;

namespace mlip::train {

int64_t BatchSize::for_system(size_t index, int64_t natoms) const {
  switch (kind) {
    case Kind::kFixed:
      return value;
    case Kind::kList:
      if (index >= list.size()) {
        throw Error("batch_size: " + std::to_string(list.size()) + " entries for " +
                    std::to_string(index + 1) + " systems (one entry per system is needed)");
      }
      return list[index];
    case Kind::kAuto:
      if (natoms <= 0) {
        throw Error("batch_size: \"auto\" needs a positive number of atoms, got " +
                    std::to_string(natoms));
      }
      return std::max<int64_t>(1, (value + natoms - 1) / natoms);
  }
  return value;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Scalars and how they are shown in messages

/// The value as the user wrote it: plain scalars bare, quoted ones in double quotes, lists and
/// mappings in flow style (shortened when long).
std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return node.Tag() == "?" ? node.Scalar() : "\"" + node.Scalar() + "\"";
  YAML::Emitter out;
  out.SetSeqFormat(YAML::Flow);
  out.SetMapFormat(YAML::Flow);
  out << node;
  std::string text = out.c_str();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return (node.IsSequence() ? "a list " : "a mapping ") + text;
}

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(path.empty() ? message : path + ": " + message);
}

[[noreturn]] void expected(const std::string& path, const std::string& what,
                           const YAML::Node& got) {
  fail(path, "expected " + what + ", got " + describe(got));
}

/// Whether `node` is an unquoted, untagged scalar (numbers and booleans must be written so).
bool is_plain(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

enum class Bound { kAny, kNonNegative, kPositive };

std::string number_kind(Bound bound, const std::string& noun) {
  switch (bound) {
    case Bound::kNonNegative:
      return "a non-negative " + noun;
    case Bound::kPositive:
      return "a positive " + noun;
    default:
      return (noun[0] == 'i' ? "an " : "a ") + noun;
  }
}

bool in_bound(double v, Bound bound) {
  return bound == Bound::kAny || (bound == Bound::kPositive ? v > 0 : v >= 0);
}

/// Parses a decimal integer written in full ("12", "-3"); nothing else (no "1e3", "12.0").
bool parse_integer(const std::string& text, int64_t& out) {
  static const std::regex kInteger("[-+]?[0-9]+");
  if (!std::regex_match(text, kInteger)) return false;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  out = v;
  return true;
}

/// Parses a finite decimal number ("1", "-0.5", "3.51e-8"; not "nan", "inf" or hex).
bool parse_number(const std::string& text, double& out) {
  static const std::regex kNumber("[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?");
  if (!std::regex_match(text, kNumber)) return false;
  out = std::strtod(text.c_str(), nullptr);
  return std::isfinite(out);
}

int64_t to_integer(const YAML::Node& node, const std::string& path, Bound bound) {
  int64_t v = 0;
  if (!is_plain(node) || !parse_integer(node.Scalar(), v) || !in_bound(double(v), bound)) {
    expected(path, number_kind(bound, "integer"), node);
  }
  return v;
}

double to_number(const YAML::Node& node, const std::string& path, Bound bound) {
  double v = 0;
  if (!is_plain(node) || !parse_number(node.Scalar(), v) || !in_bound(v, bound)) {
    expected(path, number_kind(bound, "number"), node);
  }
  return v;
}

/// Reads a YAML boolean written as true/True/TRUE or false/False/FALSE (not yes/no/on/off).
bool parse_bool(const YAML::Node& node, bool& out) {
  if (!is_plain(node)) return false;
  const std::string& s = node.Scalar();
  out = s == "true" || s == "True" || s == "TRUE";
  return out || s == "false" || s == "False" || s == "FALSE";
}

bool to_bool(const YAML::Node& node, const std::string& path) {
  bool v = false;
  if (!parse_bool(node, v)) expected(path, "true or false", node);
  return v;
}

std::string to_text(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar() || node.Scalar().empty()) expected(path, "a non-empty string", node);
  return node.Scalar();
}

uint64_t to_seed(const YAML::Node& node, const std::string& path) {
  static const std::regex kDigits("\\+?[0-9]+");
  if (is_plain(node) && std::regex_match(node.Scalar(), kDigits)) {
    errno = 0;
    const unsigned long long v = std::strtoull(node.Scalar().c_str(), nullptr, 10);
    if (errno != ERANGE) return v;
  }
  expected(path, "a non-negative integer or null", node);
}

/// A list whose elements are read by `element(node, "path[i]")`; `what` names the whole.
template <class T, class F>
std::vector<T> to_list(const YAML::Node& node, const std::string& path, const std::string& what,
                       F element) {
  if (!node.IsSequence() || node.size() == 0) expected(path, what, node);
  std::vector<T> out;
  for (size_t i = 0; i < node.size(); ++i) {
    out.push_back(element(node[i], path + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + ("\"" + items[i] + "\"");
  }
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// ---------------------------------------------------------------------------------------------
// Section: one mapping of the input, with its path and the keys it may hold

/// A mapping of the input ("training.training_data"), checked on construction: it must be a
/// mapping, and every key must be known (keys starting with '_' are comments). `old_names` are
/// accepted but never suggested. The readers return the default when the key is absent.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::vector<std::string> known,
          std::vector<std::string> old_names = {})
      : node_(node), path_(std::move(path)), known_(std::move(known)) {
    if (!node_.IsDefined() || node_.IsNull()) return;  // an absent section reads as empty
    if (!node_.IsMap()) {
      expected(path_, "a mapping with keys " + join(known_), node_);
    }
    std::vector<std::string> seen;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) fail(path_, "expected string keys, got " + describe(kv.first));
      const std::string& key = kv.first.Scalar();
      if (!key.empty() && key[0] == '_') continue;
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        fail(path_of(key), "duplicate key");
      }
      seen.push_back(key);
      if (std::find(known_.begin(), known_.end(), key) == known_.end() &&
          std::find(old_names.begin(), old_names.end(), key) == old_names.end()) {
        unknown_key(key);
      }
    }
  }

  std::string path_of(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  /// The value of `key`, or an undefined node when absent. An explicit null counts as given.
  YAML::Node get(const std::string& key) const {
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (const auto& kv : node_) {
      if (kv.first.Scalar() == key) return kv.second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }
  bool has(const std::string& key) const { return get(key).IsDefined(); }
  /// Present and not null (for keys where DeePMD takes null as "not set").
  bool has_value(const std::string& key) const { return has(key) && !get(key).IsNull(); }

  void require(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (!has(key)) fail(path_of(key), "required key is missing");
    }
  }

  /// The key actually used among a current name and its old one (DeePMD renamed a few).
  std::string current_or_old(const std::string& key, const std::string& old) const {
    if (has(key) && has(old)) {
      fail(path_, "both '" + key + "' and its old name '" + old + "' are given; keep one");
    }
    return has(old) ? old : key;
  }

  Section section(const std::string& key, std::vector<std::string> known,
                  std::vector<std::string> old_names = {}) const {
    return Section(get(key), path_of(key), std::move(known), std::move(old_names));
  }

  double number(const std::string& key, double def, Bound bound = Bound::kAny) const {
    return has(key) ? to_number(get(key), path_of(key), bound) : def;
  }
  int64_t integer(const std::string& key, int64_t def, Bound bound = Bound::kPositive) const {
    return has(key) ? to_integer(get(key), path_of(key), bound) : def;
  }
  bool flag(const std::string& key, bool def) const {
    return has(key) ? to_bool(get(key), path_of(key)) : def;
  }
  std::string text(const std::string& key, const std::string& def) const {
    return has(key) ? to_text(get(key), path_of(key)) : def;
  }
  std::optional<uint64_t> seed(const std::string& key, std::optional<uint64_t> def) const {
    if (!has(key)) return def;
    if (get(key).IsNull()) return std::nullopt;
    return to_seed(get(key), path_of(key));
  }
  std::vector<int64_t> integers(const std::string& key, const std::vector<int64_t>& def,
                                Bound bound = Bound::kPositive) const {
    if (!has(key)) return def;
    const std::string each = number_kind(bound, "integer");
    return to_list<int64_t>(
        get(key), path_of(key), "a non-empty list of " + plural(each),
        [&](const YAML::Node& n, const std::string& p) { return to_integer(n, p, bound); });
  }
  std::vector<double> numbers(const std::string& key, Bound bound) const {
    if (!has_value(key)) return {};
    const std::string each = number_kind(bound, "number");
    return to_list<double>(
        get(key), path_of(key), "a non-empty list of " + plural(each),
        [&](const YAML::Node& n, const std::string& p) { return to_number(n, p, bound); });
  }
  std::vector<std::string> texts(const std::string& key) const {
    if (!has(key)) return {};
    return to_list<std::string>(get(key), path_of(key), "a non-empty list of strings", to_text);
  }

  /// A string among `allowed`; `aliases` maps other accepted spellings onto one of them.
  std::string choice(const std::string& key, const std::string& def,
                     const std::vector<std::string>& allowed,
                     const std::vector<std::pair<std::string, std::string>>& aliases = {}) const {
    if (!has(key)) return def;
    const YAML::Node n = get(key);
    if (n.IsScalar()) {
      if (std::find(allowed.begin(), allowed.end(), n.Scalar()) != allowed.end()) return n.Scalar();
      for (const auto& [alias, name] : aliases) {
        if (n.Scalar() == alias) return name;
      }
    }
    if (allowed.size() == 1) {
      expected(path_of(key), quoted_list(allowed) + " (the only one supported)", n);
    }
    expected(path_of(key), "one of " + quoted_list(allowed), n);
  }

  /// A DeePMD option this program does not implement: accepted only with its default value.
  void only_default(const std::string& key, const std::string& what,
                    bool (*is_default)(const YAML::Node&)) const {
    if (has(key) && !is_default(get(key))) {
      expected(path_of(key), what + " (other values are not supported)", get(key));
    }
  }

 private:
  static std::string join(const std::vector<std::string>& items) {
    std::string s;
    for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
    return s;
  }
  /// "a positive integer" -> "positive integers"
  static std::string plural(const std::string& kind) {
    return kind.substr(kind.find(' ') + 1) + "s";
  }

  [[noreturn]] void unknown_key(const std::string& key) const {
    const std::string* best = nullptr;
    size_t best_distance = 0;
    for (const auto& k : known_) {
      const size_t d = edit_distance(key, k);
      if (!best || d < best_distance) best = &k, best_distance = d;
    }
    if (best && best_distance <= std::max<size_t>(2, key.size() / 3)) {
      fail(path_of(key), "unknown key; did you mean '" + *best + "'?");
    }
    fail(path_of(key), "unknown key (known: " + join(known_) + ")");
  }

  YAML::Node node_;
  std::string path_;
  std::vector<std::string> known_;
};

// ---------------------------------------------------------------------------------------------
// Values with a syntax of their own

/// training_data.batch_size: a positive integer, a list of them, "auto" or "auto:N".
BatchSize to_batch_size(const YAML::Node& node, const std::string& path) {
  const std::string what = "a positive integer, a list of positive integers, or \"auto[:N]\"";
  BatchSize b;
  if (node.IsSequence()) {
    b.kind = BatchSize::Kind::kList;
    b.list = to_list<int64_t>(node, path, what, [](const YAML::Node& n, const std::string& p) {
      return to_integer(n, p, Bound::kPositive);
    });
    return b;
  }
  if (!node.IsScalar()) expected(path, what, node);
  const std::string& s = node.Scalar();
  int64_t v = 0;
  if (is_plain(node) && parse_integer(s, v)) {
    if (v <= 0) expected(path, what, node);
    b.kind = BatchSize::Kind::kFixed;
    b.value = v;
  } else if (s == "auto") {
    b.kind = BatchSize::Kind::kAuto;
    b.value = 32;
  } else if (s.rfind("auto:", 0) == 0 && parse_integer(s.substr(5), v) && v > 0) {
    b.kind = BatchSize::Kind::kAuto;
    b.value = v;
  } else {
    expected(path, what, node);
  }
  return b;
}

/// descriptor.sel: a list of non-negative integers, "auto" or "auto:ratio".
SelSpec to_sel(const YAML::Node& node, const std::string& path) {
  const std::string what = "a list of non-negative integers, or \"auto[:ratio]\"";
  SelSpec sel;
  if (node.IsSequence()) {
    sel.values = to_list<int64_t>(node, path, what, [](const YAML::Node& n, const std::string& p) {
      return to_integer(n, p, Bound::kNonNegative);
    });
    return sel;
  }
  const std::string s = node.IsScalar() ? node.Scalar() : "";
  double ratio = 0;
  if (s == "auto") {
    sel.automatic = true;
  } else if (s.rfind("auto:", 0) == 0 && parse_number(s.substr(5), ratio) && ratio > 0) {
    sel.automatic = true;
    sel.ratio = ratio;
  } else {
    expected(path, what, node);
  }
  return sel;
}

/// Checks auto_prob: "prob_uniform", "prob_sys_size", or "prob_sys_size;a:b:w;..." with
/// 0 <= a < b <= nsys and w >= 0 (not all zero).
void check_auto_prob(const std::string& value, const std::string& path, size_t nsys) {
  if (value == "prob_uniform" || value == "prob_sys_size") return;
  const std::string syntax = "\"prob_sys_size\", \"prob_uniform\", or \"prob_sys_size;a:b:w;...\"";
  const std::string prefix = "prob_sys_size;";
  if (value.rfind(prefix, 0) != 0) fail(path, "expected " + syntax + ", got \"" + value + "\"");
  double total = 0;
  for (size_t begin = prefix.size(), end; begin <= value.size(); begin = end + 1) {
    end = std::min(value.find(';', begin), value.size());
    const std::string block = value.substr(begin, end - begin);
    static const std::regex kBlock("([0-9]+):([0-9]+):([^:]+)");
    std::smatch m;
    int64_t a = 0, b = 0;
    double w = 0;
    const bool ok = std::regex_match(block, m, kBlock) && parse_integer(m[1], a) &&
                    parse_integer(m[2], b) && parse_number(m[3], w);
    if (!ok || a >= b || b > int64_t(nsys) || w < 0) {
      fail(path, "block \"" + block + "\" of \"" + value +
                     "\": expected start:end:weight with integers 0 <= start < end <= " +
                     std::to_string(nsys) + " (the number of systems) and a weight >= 0");
    }
    total += w;
  }
  if (!(total > 0)) {
    fail(path, "expected " + syntax + " with a positive weight, got \"" + value + "\"");
  }
}

std::string resolve_system(const std::string& given, const std::string& input_dir) {
  fs::path p(given);
  if (p.is_relative() && !input_dir.empty()) p = fs::path(input_dir) / p;
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// ---------------------------------------------------------------------------------------------
// The sections

bool is_true(const YAML::Node& n) {
  bool v = false;
  return parse_bool(n, v) && v;
}
bool is_false(const YAML::Node& n) {
  bool v = true;
  return parse_bool(n, v) && !v;
}
bool is_zero(const YAML::Node& n) {
  double v = 1;
  return is_plain(n) && parse_number(n.Scalar(), v) && v == 0;
}
bool is_empty_list(const YAML::Node& n) { return n.IsNull() || (n.IsSequence() && n.size() == 0); }

void read_descriptor(const Section& d, TrainConfig& c) {
  d.require({"sel", "rcut"});
  c.descriptor_type = d.choice("type", c.descriptor_type, {"se_e2_a"}, {{"se_a", "se_e2_a"}});
  c.sel = to_sel(d.get("sel"), d.path_of("sel"));
  if (!c.sel.automatic && c.sel.values.size() != c.type_map.size()) {
    fail(d.path_of("sel"), std::to_string(c.sel.values.size()) + " entries for " +
                               std::to_string(c.type_map.size()) + " types in model.type_map");
  }
  c.rcut = d.number("rcut", c.rcut, Bound::kPositive);
  c.rcut_smth = d.number("rcut_smth", c.rcut_smth, Bound::kNonNegative);
  if (c.rcut_smth >= c.rcut) {
    expected(d.path_of("rcut_smth"), "a number below rcut (" + describe(d.get("rcut")) + ")",
             d.get("rcut_smth"));
  }
  c.neuron = d.integers("neuron", c.neuron);
  c.axis_neuron = d.integer("axis_neuron", c.axis_neuron);
  if (c.axis_neuron > c.neuron.back()) {
    fail(d.path_of("axis_neuron"), "expected at most the last neuron (" +
                                       std::to_string(c.neuron.back()) + "), got " +
                                       std::to_string(c.axis_neuron));
  }
  c.type_one_side = d.flag("type_one_side", c.type_one_side);
  c.resnet_dt = d.flag("resnet_dt", c.resnet_dt);
  c.precision =
      d.choice("precision", c.precision, {"float64", "float32"}, {{"default", "float64"}});
  c.descriptor_seed = d.seed("seed", c.descriptor_seed);
  d.choice("activation_function", "tanh", {"tanh"});
  d.only_default("trainable", "true", is_true);
  d.only_default("exclude_types", "an empty list", is_empty_list);
  d.only_default("set_davg_zero", "false", is_false);
  d.only_default("env_protection", "0", is_zero);
}

void read_fitting_net(const Section& f, TrainConfig& c) {
  f.choice("type", "ener", {"ener"});
  c.fitting_neuron = f.integers("neuron", c.fitting_neuron);
  c.fitting_resnet_dt = f.flag("resnet_dt", c.fitting_resnet_dt);
  c.fitting_precision =
      f.choice("precision", c.fitting_precision, {"float64", "float32"}, {{"default", "float64"}});
  c.fitting_seed = f.seed("seed", c.fitting_seed);
  f.choice("activation_function", "tanh", {"tanh"});
  f.only_default("trainable", "true", is_true);
  if (f.has_value("rcond")) f.number("rcond", 0.0);  // accepted for DeePMD inputs; not used
}

void read_type_map(const Section& m, TrainConfig& c) {
  c.type_map = m.texts("type_map");
  for (size_t i = 0; i < c.type_map.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (c.type_map[i] == c.type_map[j]) {
        fail(m.path_of("type_map"), "\"" + c.type_map[i] + "\" appears twice");
      }
    }
  }
}

/// model: {type: equivariant, ...}: the NequIP-style model.
void read_equivariant_model(const Section& m, TrainConfig& c) {
  m.require({"type_map"});
  c.model_type = "equivariant";
  read_type_map(m, c);
  EquivariantSettings& e = c.equivariant;
  e.r_max = m.number("r_max", e.r_max, Bound::kPositive);
  e.num_features = m.integer("num_features", e.num_features);
  e.l_max = m.integer("l_max", e.l_max, Bound::kNonNegative);
  if (e.l_max > 3) expected(m.path_of("l_max"), "an integer from 0 to 3", m.get("l_max"));
  e.parity = m.flag("parity", e.parity);
  e.num_layers = m.integer("num_layers", e.num_layers);
  e.num_bessels = m.integer("num_bessels", e.num_bessels);
  e.polynomial_p = m.number("polynomial_p", e.polynomial_p, Bound::kPositive);
  if (e.polynomial_p < 2) expected(m.path_of("polynomial_p"), "a number >= 2", m.get("polynomial_p"));
  e.radial_width = m.integer("radial_width", e.radial_width);
  e.radial_depth = m.integer("radial_depth", e.radial_depth);
  if (m.has_value("avg_num_neighbors") && !(is_plain(m.get("avg_num_neighbors")) && m.get("avg_num_neighbors").Scalar() == "auto"))
    e.avg_num_neighbors = m.number("avg_num_neighbors", 1.0, Bound::kPositive);
  c.precision = m.choice("precision", c.precision, {"float64", "float32"}, {{"default", "float64"}});
  c.fitting_precision = c.precision;
  c.descriptor_seed = m.seed("seed", c.descriptor_seed);
  c.rcut = e.r_max;
}

void read_model(const Section& m, TrainConfig& c) {
  m.choice("type", "standard", {"standard", "equivariant"});
  m.require({"type_map", "descriptor", "fitting_net"});
  read_type_map(m, c);
  for (const char* key : {"descriptor", "fitting_net"}) {
    if (!m.get(key).IsMap()) expected(m.path_of(key), "a mapping", m.get(key));
  }
  read_descriptor(m.section("descriptor", {"type", "sel", "rcut", "rcut_smth", "neuron",
                                           "axis_neuron", "type_one_side", "resnet_dt", "precision",
                                           "seed", "activation_function", "trainable",
                                           "exclude_types", "set_davg_zero", "env_protection"}),
                  c);
  read_fitting_net(m.section("fitting_net", {"type", "neuron", "resnet_dt", "precision", "seed",
                                             "activation_function", "trainable", "rcond"}),
                   c);
  m.integer("data_stat_nbatch", 10);
  m.number("data_stat_protect", 1e-2, Bound::kPositive);
}

void read_learning_rate(const Section& l, TrainConfig& c) {
  ExpLearningRate& lr = c.learning_rate;
  l.choice("type", "exp", {"exp"});
  lr.start_lr = l.number("start_lr", lr.start_lr);
  lr.stop_lr = l.number("stop_lr", lr.stop_lr);
  lr.decay_steps = l.integer("decay_steps", lr.decay_steps, Bound::kAny);
  if (l.has_value("decay_rate")) lr.decay_rate = l.number("decay_rate", 0.0, Bound::kPositive);
  lr.warmup_steps = l.integer("warmup_steps", lr.warmup_steps, Bound::kAny);
  lr.warmup_start_factor = l.number("warmup_start_factor", lr.warmup_start_factor);
  c.scale_by_worker = l.choice("scale_by_worker", c.scale_by_worker, {"linear", "sqrt", "none"});
}

void read_loss(const Section& l, TrainConfig& c) {
  l.choice("type", "ener", {"ener"});
  c.start_pref_e = l.number("start_pref_e", c.start_pref_e, Bound::kNonNegative);
  c.limit_pref_e = l.number("limit_pref_e", c.limit_pref_e, Bound::kNonNegative);
  c.start_pref_f = l.number("start_pref_f", c.start_pref_f, Bound::kNonNegative);
  c.limit_pref_f = l.number("limit_pref_f", c.limit_pref_f, Bound::kNonNegative);
  c.start_pref_v = l.number("start_pref_v", c.start_pref_v, Bound::kNonNegative);
  c.limit_pref_v = l.number("limit_pref_v", c.limit_pref_v, Bound::kNonNegative);
}

/// training_data / validation_data (the latter also reads numb_btch and single_rank).
DataConfig read_data(const Section& s, const std::string& input_dir, bool validation) {
  s.require({"systems"});
  DataConfig d;
  const YAML::Node systems = s.get("systems");
  const std::vector<std::string> given =
      systems.IsScalar() ? std::vector<std::string>{to_text(systems, s.path_of("systems"))}
                         : to_list<std::string>(systems, s.path_of("systems"),
                                                "a path or a non-empty list of paths", to_text);
  for (const auto& path : given) d.systems.push_back(resolve_system(path, input_dir));
  const std::string nsys = std::to_string(d.systems.size()) + " systems";

  if (s.has("batch_size")) {
    d.batch_size = to_batch_size(s.get("batch_size"), s.path_of("batch_size"));
  }
  if (d.batch_size.kind == BatchSize::Kind::kList && d.batch_size.list.size() != d.systems.size()) {
    fail(s.path_of("batch_size"),
         std::to_string(d.batch_size.list.size()) + " entries for " + nsys);
  }
  const std::string prob_key = s.current_or_old("auto_prob", "auto_prob_style");
  d.auto_prob = s.text(prob_key, d.auto_prob);
  check_auto_prob(d.auto_prob, s.path_of(prob_key), d.systems.size());
  d.sys_probs = s.numbers("sys_probs", Bound::kNonNegative);
  if (!d.sys_probs.empty()) {
    if (d.sys_probs.size() != d.systems.size()) {
      fail(s.path_of("sys_probs"), std::to_string(d.sys_probs.size()) + " entries for " + nsys);
    }
    if (std::all_of(d.sys_probs.begin(), d.sys_probs.end(), [](double p) { return p == 0; })) {
      expected(s.path_of("sys_probs"), "at least one positive probability", s.get("sys_probs"));
    }
  }
  if (validation) {
    d.numb_btch = s.integer("numb_btch", d.numb_btch);
    d.single_rank = s.flag("single_rank", d.single_rank);
    d.padded = s.flag("padded", d.padded);
    if (d.single_rank && d.padded)
      fail(s.path_of("padded"), "expected at most one of single_rank and padded to be true, got both");
  }
  return d;
}

void read_training(const Section& t, const std::string& input_dir, TrainConfig& c) {
  t.require({"training_data"});
  if (!t.get("training_data").IsMap()) {
    expected(t.path_of("training_data"), "a mapping", t.get("training_data"));
  }
  const std::string steps_key = t.current_or_old("numb_steps", "stop_batch");
  if (!t.has(steps_key)) fail(t.path_of("numb_steps"), "required key is missing");

  const std::vector<std::string> data_keys = {"systems", "batch_size", "auto_prob", "sys_probs"};
  c.training_data =
      read_data(t.section("training_data", data_keys, {"auto_prob_style"}), input_dir, false);
  if (t.has_value("validation_data")) {
    std::vector<std::string> keys = data_keys;
    keys.insert(keys.end(), {"numb_btch", "single_rank", "padded"});
    c.validation_data =
        read_data(t.section("validation_data", keys, {"auto_prob_style"}), input_dir, true);
  }
  c.numb_steps = t.integer(steps_key, c.numb_steps);
  c.seed = t.seed("seed", c.seed);
  c.disp_file = t.text("disp_file", c.disp_file);
  c.disp_freq = t.integer("disp_freq", c.disp_freq);
  c.save_freq = t.integer("save_freq", c.save_freq);
  c.save_ckpt = t.text("save_ckpt", c.save_ckpt);
  c.max_ckpt_keep = t.integer("max_ckpt_keep", c.max_ckpt_keep);
  c.ema_decay = t.number("ema_decay", c.ema_decay);
  if (c.ema_decay < 0 || c.ema_decay >= 1) {
    expected(t.path_of("ema_decay"), "a number in [0, 1) (0 turns the moving average off)", t.get("ema_decay"));
  }
  t.flag("disp_training", true);
  t.flag("time_training", true);
  t.only_default("profiling", "false", is_false);
  t.only_default("tensorboard", "false", is_false);
}

void read_config(const YAML::Node& root, const std::string& input_dir, TrainConfig& c) {
  if (!root.IsMap()) {
    expected("", "a mapping with keys model, learning_rate, loss, training at the top level", root);
  }
  const Section top(root, "", {"model", "learning_rate", "loss", "training"});
  top.require({"model", "training"});
  for (const char* key : {"model", "training"}) {
    if (!top.get(key).IsMap()) expected(key, "a mapping", top.get(key));
  }
  const YAML::Node model_type = top.get("model")["type"];
  if (model_type && is_plain(model_type) && model_type.Scalar() == "equivariant") {
    read_equivariant_model(top.section("model", {"type", "type_map", "r_max", "num_features", "l_max", "parity",
                                                 "num_layers", "num_bessels", "polynomial_p", "radial_width",
                                                 "radial_depth", "avg_num_neighbors", "precision", "seed"}),
                           c);
  } else {
    read_model(top.section("model", {"type", "type_map", "descriptor", "fitting_net", "data_stat_nbatch",
                                     "data_stat_protect"}),
               c);
  }
  read_learning_rate(
      top.section("learning_rate", {"type", "start_lr", "stop_lr", "decay_steps", "decay_rate",
                                    "warmup_steps", "warmup_start_factor", "scale_by_worker"}),
      c);
  read_loss(top.section("loss", {"type", "start_pref_e", "limit_pref_e", "start_pref_f",
                                 "limit_pref_f", "start_pref_v", "limit_pref_v"}),
            c);
  read_training(top.section("training",
                            {"training_data", "validation_data", "numb_steps", "seed", "disp_file",
                             "disp_freq", "save_freq", "save_ckpt", "max_ckpt_keep", "ema_decay",
                             "disp_training", "time_training", "profiling", "tensorboard"},
                            {"stop_batch"}),
                input_dir, c);
  c.learning_rate.numb_steps = c.numb_steps;
  c.learning_rate.validate();
}

}  // namespace

TrainConfig parse_train_config(const std::string& text, const std::string& source,
                               const std::string& input_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) {
      where = ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    }
    throw Error(source + where + ": YAML syntax error: " + e.msg);
  }
  TrainConfig c;
  try {
    read_config(root, input_dir, c);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.msg);
  }
  c.input_dir = input_dir;
  c.input_text = text;
  return c;
}

TrainConfig load_train_config(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(path + ": cannot read the training input (" + std::strerror(EISDIR) + ")");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw Error(path + ": cannot read the training input (" + std::strerror(err ? err : ENOENT) +
                ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read the training input (read failed)");
  std::string dir = fs::absolute(path, ec).parent_path().lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  TrainConfig c = parse_train_config(text.str(), path, dir);
  c.input_path = path;
  return c;
}

}  // namespace mlip::train
