#include "app/command_line.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

namespace mlip::app {
namespace {

/// Thrown by a value check from inside CLI11's parse: the option, which of its values (0: the
/// first given) and what is wrong; CommandLine::read turns it into a UsageError.
struct RefusedValue {
  const CLI::Option* option;
  std::size_t occurrence;
  std::string problem;
};

bool is_help(const std::string& argument) { return argument == "-h" || argument == "--help"; }

}  // namespace

bool looks_like_option(const std::string& argument) {
  return argument.size() > 1 && argument[0] == '-' && !std::isdigit(static_cast<unsigned char>(argument[1])) &&
         argument[1] != '.';
}

namespace {

/// `value` as a finite number when all of it is one.
std::optional<double> finite_number(const std::string& value) {
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != value.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::string positive_number_problem(const std::string& value, double& number) {
  const std::optional<double> v = finite_number(value);
  if (!v || !(*v > 0.0)) return "expected a positive number, got '" + value + "'";
  number = *v;
  return "";
}

std::string non_negative_number_problem(const std::string& value, double& number) {
  const std::optional<double> v = finite_number(value);
  if (!v || !(*v >= 0.0)) return "expected a number >= 0, got '" + value + "'";
  number = *v;
  return "";
}

namespace {

/// `value` as a whole number in int's range when all of it is one ("3", "3.0", "3e0").
std::optional<int> whole_number(const std::string& value) {
  const std::optional<double> v = finite_number(value);
  if (!v || *v != std::floor(*v) || std::fabs(*v) > double(std::numeric_limits<int>::max())) return std::nullopt;
  return int(*v);
}

}  // namespace

std::string positive_integer_problem(const std::string& value, int& number) {
  const std::optional<int> v = whole_number(value);
  if (!v || *v < 1) return "expected a positive integer, got '" + value + "'";
  number = *v;
  return "";
}

std::string non_negative_integer_problem(const std::string& value, int& number) {
  const std::optional<int> v = whole_number(value);
  if (!v || *v < 0) return "expected an integer >= 0, got '" + value + "'";
  number = *v;
  return "";
}

CommandLine::CommandLine(std::string command, const char* usage)
    : app_("mlip " + command, "mlip " + command), command_(std::move(command)), usage_(usage) {
  app_.set_help_flag();  // -h/--help print the command's own usage text (read)
  app_.allow_extras();   // unknown options and extra arguments are reported in mlip's words
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

CLI::Option* CommandLine::add_value(const std::string& names, std::string& target, ValueCheck check) {
  CLI::Option* option = app_.add_option(names, target);
  value_needs_[option] = ValueNeed{"expected a value"};
  if (check) add_check(option, std::move(check));
  return option;
}

CLI::Option* CommandLine::add_list(const std::string& names, std::vector<std::string>& target, std::string missing) {
  CLI::Option* option = app_.add_option(names, target);
  value_needs_[option] = ValueNeed{std::move(missing)};
  return option;
}

CLI::Option* CommandLine::add_flag(const std::string& names, bool& target) { return app_.add_flag(names, target); }

CLI::Option* CommandLine::add_positional(const std::string& name, std::string& target,
                                         std::function<std::string(const std::string&, const std::string&)> second) {
  positional_ = &target;
  second_positional_ = std::move(second);
  return app_.add_option(name, target);
}

void CommandLine::add_check(CLI::Option* option, ValueCheck check) {
  // CLI11 checks an option's values in the order given; the count names the one refused.
  auto occurrence = std::make_shared<std::size_t>(0);
  option->check(CLI::Validator(
      [option, check = std::move(check), occurrence](std::string& value) {
        std::string problem = check(value);
        if (!problem.empty()) throw RefusedValue{option, *occurrence, std::move(problem)};
        ++*occurrence;
        return std::string();
      },
      ""));
}

bool CommandLine::read(const std::vector<std::string>& args) {
  // -h/--help ends the reading: what comes before it must be right, what comes after is ignored.
  const auto help = help_position(args);
  const std::vector<std::string> read_args(args.begin(), help);
  check_values_present(read_args);
  std::vector<std::string> last_first(read_args.rbegin(), read_args.rend());  // CLI11's order
  try {
    app_.parse(last_first);
  } catch (const RefusedValue& refused) {
    throw error(typed_name(refused.option, refused.occurrence, read_args) + ": " + refused.problem);
  } catch (const CLI::ParseError& e) {
    // Not expected: check_values_present and the checks come first, the rest is allowed.
    throw error(command_ + ": " + e.what());
  }
  check_leftovers();
  if (help == args.end()) return true;
  std::cout << usage_;
  return false;
}

/// Where -h/--help is among `args` (args.end() when it is not): the first one that is not the
/// value of an option that takes any argument ("-r -h" is -r's value '-h').
std::vector<std::string>::const_iterator CommandLine::help_position(const std::vector<std::string>& args) const {
  for (auto at = args.begin(); at != args.end(); ++at) {
    if (is_help(*at)) return at;
    for (const auto& [option, need] : value_needs_)
      if (need.any_argument && option->check_name(*at) && at + 1 != args.end()) {
        ++at;
        break;
      }
  }
  return args.end();
}

/// Throws "<name as typed>: <missing>" for the first option whose value is missing: it is the
/// last argument, or (unless it takes any argument) an option follows it.
void CommandLine::check_values_present(const std::vector<std::string>& args) const {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!looks_like_option(args[i])) continue;
    const auto named = std::find_if(value_needs_.begin(), value_needs_.end(),
                                    [&](const auto& entry) { return entry.first->check_name(args[i]); });
    if (named == value_needs_.end()) continue;
    const ValueNeed& need = named->second;
    const bool value_follows = i + 1 < args.size() && (need.any_argument || !looks_like_option(args[i + 1]));
    if (!value_follows) throw error(args[i] + ": " + need.missing);
    if (need.any_argument) ++i;  // its value is not an option, whatever it looks like
  }
}

/// Throws for the first argument that no option took: "<command>: unknown option 'X'", or the
/// positional argument's message for a second one.
void CommandLine::check_leftovers() const {
  const std::vector<std::string> leftovers = app_.remaining();
  if (leftovers.empty()) return;
  const std::string& first = leftovers.front();
  if (looks_like_option(first) || positional_ == nullptr) throw error(command_ + ": unknown option '" + first + "'");
  throw error(command_ + ": " + second_positional_(*positional_, first));
}

/// The name by which the `occurrence`-th value of `option` was given ("-r" or "--rcut"; also
/// from "--rcut=6" and "-r6"), for messages.
std::string CommandLine::typed_name(const CLI::Option* option, std::size_t occurrence,
                                    const std::vector<std::string>& args) const {
  std::string name = option->get_name();
  std::size_t seen = 0;
  for (const std::string& argument : args) {
    if (!looks_like_option(argument)) continue;
    const bool long_name = argument.rfind("--", 0) == 0;
    const std::string typed = long_name ? argument.substr(0, argument.find('=')) : argument.substr(0, 2);
    if (!option->check_name(typed)) continue;
    name = typed;
    if (seen++ == occurrence) break;
  }
  return name;
}

}  // namespace mlip::app
