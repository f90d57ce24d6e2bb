#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mlip::models {

/// A frozen model's inference settings (docs/deploy.md "Inference settings"): what its own
/// inference and `mlip compress` need to rebuild the model's computation, stored in the archive
/// as the extra file `inference_settings`, so that nothing reads the training input again.
///
/// The text is one "key: value" line each after a first line "mlip inference settings <version>".
/// Read tolerantly: keys this version does not know are skipped (a later mlip may add some), a key
/// that is absent takes the default the reader gives (the value that reproduces models frozen
/// before the key existed). Keys are the record's own, fixed once written: renaming a key of the
/// training input changes how freeze fills the record, never the record.
class SettingsRecord {
 public:
  /// The version this mlip writes. A record of another version is read all the same (by key).
  static constexpr int kVersion = 1;

  /// source: names the record in error messages (e.g. "model.pt: inference_settings").
  explicit SettingsRecord(std::string source = "inference settings");

  /// Sets `key` (no ':' or line break in it) to `value` (no line break), replacing it.
  void set(const std::string& key, const std::string& value);
  void set_number(const std::string& key, double value);  ///< written to 17 significant digits
  void set_integer(const std::string& key, int64_t value);
  void set_flag(const std::string& key, bool value);      ///< "true" / "false"
  void set_integers(const std::string& key, const std::vector<int64_t>& values);  ///< space-separated
  void set_words(const std::string& key, const std::vector<std::string>& values);  ///< space-separated

  bool has(const std::string& key) const;
  /// The value of `key`, or `fallback` when absent. A value of the wrong form is an mlip::Error
  /// naming the source, the key, what was expected and what was found.
  std::string text(const std::string& key, const std::string& fallback) const;
  double number(const std::string& key, double fallback) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  bool flag(const std::string& key, bool fallback) const;
  std::vector<int64_t> integers(const std::string& key, const std::vector<int64_t>& fallback) const;
  std::vector<std::string> words(const std::string& key, const std::vector<std::string>& fallback) const;
  /// As text(), but an absent key is an mlip::Error (for what no default can stand in for).
  std::string required(const std::string& key) const;

  /// The version line and the keys in alphabetical order.
  std::string to_text() const;
  /// Reads to_text()'s form; errors name `source` and the line.
  static SettingsRecord parse(const std::string& text, const std::string& source);

  /// Copies each `from` key present here into `to` under the name `into` (values as they are):
  /// how a reader of an older form renames its keys into the record's.
  void copy_renamed(SettingsRecord& to, const std::vector<std::pair<std::string, std::string>>& from_into) const;

  /// Whether two values of a key are the same setting: the same words, where a word that is a
  /// number on both sides compares as a number ("4", "4.0" and "4.000000" are one value; a number
  /// written with fewer decimals, as mlip 0.1 wrote the cutoff, is another written with more
  /// rounded to as many).
  static bool same_value(const std::string& a, const std::string& b);

  /// The version it was read with (kVersion for a record made here).
  int version() const { return version_; }
  const std::string& source() const { return source_; }
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  [[noreturn]] void bad(const std::string& key, const std::string& expected) const;

  std::string source_;
  int version_ = kVersion;
  std::map<std::string, std::string> values_;
};

}  // namespace mlip::models
