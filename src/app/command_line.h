#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mlip::app {

/// A usage error: printed as "mlip: <message>", a blank line and the command's usage; exit code 2.
struct UsageError {
  std::string message;
  std::string usage;
};

/// Whether a command-line argument is an option's name (or an unknown option) rather than a
/// value: "-x", "--name"; not "-", "-5" or "-.5" (negative numbers are values).
bool looks_like_option(const std::string& argument);

/// What is wrong with `value` as a positive finite number ("expected a positive number, got
/// 'abc'"), or "" when it is one; `number` receives it.
std::string positive_number_problem(const std::string& value, double& number);
/// The same for a finite number >= 0 ("expected a number >= 0, got '-1'").
std::string non_negative_number_problem(const std::string& value, double& number);
/// The same for a whole number >= 1 ("expected a positive integer, got '1.5'").
std::string positive_integer_problem(const std::string& value, int& number);
/// The same for a whole number >= 0 ("expected an integer >= 0, got '-1'").
std::string non_negative_integer_problem(const std::string& value, int& number);

/// One command's options, read by CLI11 (docs: README "Commands"), in mlip's words: every
/// problem becomes a UsageError with the message mlip has always printed, and -h/--help prints
/// the command's own usage text. Accepts what CLI11 accepts beyond that (--name=value, -nVALUE).
class CommandLine {
 public:
  /// `command`: "train", "freeze", ...; `usage`: the text --help prints and errors end with.
  CommandLine(std::string command, const char* usage);

  /// A check of one value: "" when it is good, else the problem ("expected a positive number,
  /// got '-1'"), which is printed after the option's name as typed.
  using ValueCheck = std::function<std::string(const std::string& value)>;

  /// An option with one text value ("-o,--output"); given twice, the last one counts. `check`
  /// (optional) sees every value given, in order.
  CLI::Option* add_value(const std::string& names, std::string& target, ValueCheck check = nullptr);

  /// Which arguments an option may take as its value: any that does not look like an option (a
  /// value missing: "<name as typed>: expected a value"), or any at all (only the end of the line
  /// lacks one; its parse refuses "--x" in its own words, as mlip always has for numbers).
  enum class ValueArgument { kNotOptionLike, kAny };

  /// An option with one value that `parse` turns into `target` (a number): parse(value, target)
  /// returns "" or the problem, as a ValueCheck does. Given twice, the last one counts.
  template <typename T, typename Parse>
  CLI::Option* add_parsed(const std::string& names, T& target, Parse parse,
                          ValueArgument accepts = ValueArgument::kNotOptionLike) {
    CLI::Option* option = app_.add_option(names);  // the value is kept by `parse`, not by CLI11
    value_needs_[option] = ValueNeed{"expected a value", accepts == ValueArgument::kAny};
    add_check(option, [&target, parse](const std::string& value) { return parse(value, target); });
    return option;
  }

  /// An option with one or more values ("-s a b c"; given again, the values add up); without any
  /// (the end of the line, or an option next), "<name as typed>: <missing>".
  CLI::Option* add_list(const std::string& names, std::vector<std::string>& target, std::string missing);

  /// An option without a value ("--atomic"): `target` becomes true when it is given.
  CLI::Option* add_flag(const std::string& names, bool& target);

  /// The command's one positional argument; `second(first, other)` is the message for another one.
  CLI::Option* add_positional(const std::string& name, std::string& target,
                              std::function<std::string(const std::string&, const std::string&)> second);

  /// Reads `args` (those after the command's name). Returns false when -h/--help came before any
  /// problem: the usage is printed and the command has nothing more to do. Throws UsageError.
  bool read(const std::vector<std::string>& args);

  /// A UsageError with this command's usage.
  UsageError error(const std::string& message) const { return UsageError{message, usage_}; }

 private:
  void add_check(CLI::Option* option, ValueCheck check);
  void check_values_present(const std::vector<std::string>& args) const;
  void check_leftovers() const;
  std::string typed_name(const CLI::Option* option, std::size_t occurrence, const std::vector<std::string>& args) const;

  CLI::App app_;
  std::string command_;
  const char* usage_;
  /// What an option's value must be: what to say when it is missing; whether any argument will do.
  struct ValueNeed {
    std::string missing;
    bool any_argument = false;
  };
  std::vector<std::string>::const_iterator help_position(const std::vector<std::string>& args) const;

  std::map<const CLI::Option*, ValueNeed> value_needs_;
  std::string* positional_ = nullptr;
  std::function<std::string(const std::string&, const std::string&)> second_positional_;
};

}  // namespace mlip::app
