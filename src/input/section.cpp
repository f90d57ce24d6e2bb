#include "input/section.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>

#include "error.h"

namespace mlip::input {

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

void fail(const std::string& path, const std::string& message) {
  throw Error(path.empty() ? message : path + ": " + message);
}

void expected(const std::string& path, const std::string& what,
                           const YAML::Node& got) {
  fail(path, "expected " + what + ", got " + describe(got));
}

/// Whether `node` is a scalar. Quoted and plain scalars read the same (`type: "equivariant"`,
/// JSON's `"type": "equivariant"` and `type: equivariant` are one value; so are `"6.0"` and 6.0).
bool is_scalar(const YAML::Node& node) { return node.IsScalar(); }


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

static bool in_bound(double v, Bound bound) {
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
  if (!is_scalar(node) || !parse_integer(node.Scalar(), v) || !in_bound(double(v), bound)) {
    expected(path, number_kind(bound, "integer"), node);
  }
  return v;
}

double to_number(const YAML::Node& node, const std::string& path, Bound bound) {
  double v = 0;
  if (!is_scalar(node) || !parse_number(node.Scalar(), v) || !in_bound(v, bound)) {
    expected(path, number_kind(bound, "number"), node);
  }
  return v;
}

/// Reads a YAML boolean written as true/True/TRUE or false/False/FALSE (not yes/no/on/off).
bool parse_bool(const YAML::Node& node, bool& out) {
  if (!is_scalar(node)) return false;
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
  if (is_scalar(node) && std::regex_match(node.Scalar(), kDigits)) {
    errno = 0;
    const unsigned long long v = std::strtoull(node.Scalar().c_str(), nullptr, 10);
    if (errno != ERANGE) return v;
  }
  expected(path, "a non-negative integer or null", node);
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
  return is_scalar(n) && parse_number(n.Scalar(), v) && v == 0;
}
bool is_empty_list(const YAML::Node& n) { return n.IsNull() || (n.IsSequence() && n.size() == 0); }

}  // namespace mlip::input
