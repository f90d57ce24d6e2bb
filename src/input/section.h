#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlip::input {

/// Reading one input file's YAML with messages that name the key's path, what was expected
/// and what was found: `training.batch_size: expected a positive integer, got -3`. Used by the
/// training input (train/config.h) and by each model for its own section (models/registry.h).

/// The value as the user wrote it: plain scalars bare, quoted ones in double quotes, lists and
/// mappings in flow style (shortened when long).
std::string describe(const YAML::Node& node);
/// Throws mlip::Error("<path>: <message>").
[[noreturn]] void fail(const std::string& path, const std::string& message);
/// Throws mlip::Error("<path>: expected <what>, got <describe(got)>").
[[noreturn]] void expected(const std::string& path, const std::string& what, const YAML::Node& got);
/// Whether `node` is a scalar, quoted or not: quoting never changes how a value reads.
bool is_scalar(const YAML::Node& node);

enum class Bound { kAny, kNonNegative, kPositive };
/// "a positive integer", "a number", ...
std::string number_kind(Bound bound, const std::string& noun);
/// Parses a decimal integer written in full ("12", "-3"); nothing else (no "1e3", "12.0").
bool parse_integer(const std::string& text, int64_t& out);
/// Parses a finite decimal number ("1", "-0.5", "3.51e-8"; not "nan", "inf" or hex).
bool parse_number(const std::string& text, double& out);
/// Reads a YAML boolean written as true/True/TRUE or false/False/FALSE (not yes/no/on/off).
bool parse_bool(const YAML::Node& node, bool& out);
int64_t to_integer(const YAML::Node& node, const std::string& path, Bound bound);
double to_number(const YAML::Node& node, const std::string& path, Bound bound);
bool to_bool(const YAML::Node& node, const std::string& path);
std::string to_text(const YAML::Node& node, const std::string& path);
uint64_t to_seed(const YAML::Node& node, const std::string& path);
/// "a", "a or b", "a, b or c", each in double quotes.
std::string quoted_list(const std::vector<std::string>& items);
size_t edit_distance(const std::string& a, const std::string& b);

/// A list whose elements are read by `element(node, "path[i]")`; `what` names the whole.
template <class T, class F>
std::vector<T> to_list(const YAML::Node& node, const std::string& path, const std::string& what, F element) {
  if (!node.IsSequence() || node.size() == 0) expected(path, what, node);
  std::vector<T> out;
  for (size_t i = 0; i < node.size(); ++i) out.push_back(element(node[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

/// Predicates for Section::only_default.
bool is_true(const YAML::Node& n);
bool is_false(const YAML::Node& n);
bool is_zero(const YAML::Node& n);
bool is_empty_list(const YAML::Node& n);

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

}  // namespace mlip::input
