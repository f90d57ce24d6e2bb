#include "models/settings_record.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "error.h"

namespace mlip::models {
namespace {

constexpr const char* kHeader = "mlip inference settings ";

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool parse_integer(const std::string& s, int64_t& value) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  value = int64_t(v);
  return true;
}

/// `s` as a finite number when it is one whole ("4", "4.000000", "1.0e-4"); else nullopt.
bool parse_number(const std::string& s, double& value) {
  if (s.empty()) return false;
  char* end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(value);
}

/// Whether the number written as `text` (fixed point, e.g. std::to_string's "4.123457") is
/// `value` rounded to as many decimals as `text` shows.
bool rounds_to(const std::string& text, double value) {
  if (text.find_first_of("eEnN") != std::string::npos) return false;
  const size_t point = text.find('.');
  const int decimals = point == std::string::npos ? 0 : int(text.size() - point - 1);
  char rounded[400];
  std::snprintf(rounded, sizeof rounded, "%.*f", decimals, value);
  double a = 0, b = 0;
  return parse_number(rounded, a) && parse_number(text, b) && a == b;
}

bool same_word(const std::string& a, const std::string& b) {
  if (a == b) return true;
  double x = 0, y = 0;
  if (!parse_number(a, x) || !parse_number(b, y)) return false;
  return x == y || rounds_to(a, y) || rounds_to(b, x);
}

}  // namespace

bool SettingsRecord::same_value(const std::string& a, const std::string& b) {
  const std::vector<std::string> x = split_words(a), y = split_words(b);
  if (x.size() != y.size()) return false;
  for (size_t k = 0; k < x.size(); ++k)
    if (!same_word(x[k], y[k])) return false;
  return true;
}

SettingsRecord::SettingsRecord(std::string source) : source_(std::move(source)) {}

void SettingsRecord::set(const std::string& key, const std::string& value) {
  if (key.empty() || key.find_first_of(":\n") != std::string::npos || value.find('\n') != std::string::npos)
    throw Error(source_ + ": internal error: the key \"" + key + "\" or its value cannot be recorded");
  values_[key] = value;
}

void SettingsRecord::set_number(const std::string& key, double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  set(key, text);
}

void SettingsRecord::set_integer(const std::string& key, int64_t value) { set(key, std::to_string(value)); }
void SettingsRecord::set_flag(const std::string& key, bool value) { set(key, value ? "true" : "false"); }

void SettingsRecord::set_integers(const std::string& key, const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t v : values) text += (text.empty() ? "" : " ") + std::to_string(v);
  set(key, text);
}

void SettingsRecord::set_words(const std::string& key, const std::vector<std::string>& values) {
  std::string text;
  for (const auto& v : values) {
    if (v.empty() || v.find_first_of(" \t") != std::string::npos)
      throw Error(source_ + ": " + key + ": the name \"" + v + "\" cannot be recorded (empty or with a space)");
    text += (text.empty() ? "" : " ") + v;
  }
  set(key, text);
}

bool SettingsRecord::has(const std::string& key) const { return values_.count(key) != 0; }

void SettingsRecord::bad(const std::string& key, const std::string& expected) const {
  throw Error(source_ + ": " + key + ": expected " + expected + ", got \"" + values_.at(key) + "\"");
}

std::string SettingsRecord::text(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::string SettingsRecord::required(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw Error(source_ + ": no '" + key + "' (the model cannot be rebuilt without it)");
  return it->second;
}

double SettingsRecord::number(const std::string& key, double fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || end != it->second.c_str() + it->second.size() || !std::isfinite(v))
    bad(key, "a finite number");
  return v;
}

int64_t SettingsRecord::integer(const std::string& key, int64_t fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  if (!parse_integer(it->second, v)) bad(key, "an integer");
  return v;
}

bool SettingsRecord::flag(const std::string& key, bool fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  bad(key, "true or false");
}

std::vector<int64_t> SettingsRecord::integers(const std::string& key, const std::vector<int64_t>& fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  std::vector<int64_t> out;
  for (const auto& w : split_words(it->second)) {
    int64_t v = 0;
    if (!parse_integer(w, v)) bad(key, "integers separated by spaces");
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> SettingsRecord::words(const std::string& key, const std::vector<std::string>& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : split_words(it->second);
}

void SettingsRecord::copy_renamed(SettingsRecord& to,
                                  const std::vector<std::pair<std::string, std::string>>& from_into) const {
  for (const auto& [from, into] : from_into) {
    auto it = values_.find(from);
    if (it != values_.end()) to.set(into, it->second);
  }
}

std::string SettingsRecord::to_text() const {
  std::string text = kHeader + std::to_string(kVersion) + "\n";
  for (const auto& [key, value] : values_) text += key + ": " + value + "\n";
  return text;
}

SettingsRecord SettingsRecord::parse(const std::string& text, const std::string& source) {
  SettingsRecord record(source);
  std::istringstream in(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = source + ": line " + std::to_string(number);
    if (number == 1) {
      const std::string header = trimmed(line);
      int64_t version = 0;
      if (header.rfind(kHeader, 0) != 0 || !parse_integer(header.substr(std::string(kHeader).size()), version) ||
          version < 1)
        throw Error(where + ": expected \"" + std::string(kHeader) + "<version>\", got \"" + header + "\"");
      record.version_ = int(version);
      continue;
    }
    if (trimmed(line).empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) throw Error(where + ": expected \"key: value\", got \"" + trimmed(line) + "\"");
    record.values_[trimmed(line.substr(0, colon))] = trimmed(line.substr(colon + 1));
  }
  if (number == 0) throw Error(source + ": empty (expected \"" + std::string(kHeader) + "<version>\" and key lines)");
  return record;
}

}  // namespace mlip::models
