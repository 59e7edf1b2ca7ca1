// SPDX-License-Identifier: MIT
// Numbers on the command line are decimal. CLI11 reads an integer with
// strtoll's base 0, so "-n 010" would run 8 iterations and "--np 0x10" 16
// ranks, and a float with strtod, so "-f nan" and "-f inf" would pass every
// range check (a comparison with NaN is false) and reach the code as numbers.
// Every numeric option of every subcommand is refused unless written in
// decimal, with the option, the value and what is accepted.
#include <functional>
#include <regex>
#include <string>

#include "cli/commands.hpp"

namespace rdmx::cli {
namespace {

// A leading zero before another digit is refused: "010" is 10 to some readers and 8 to others.
const std::regex& whole_number() {
  static const std::regex pattern(R"(-?(0|[1-9][0-9]*))");
  return pattern;
}

const std::regex& decimal_number() {
  static const std::regex pattern(R"(-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  return pattern;
}

CLI::Validator decimal_validator(bool whole) {
  return CLI::Validator(
      [whole](std::string& value) -> std::string {
        if (std::regex_match(value, whole ? whole_number() : decimal_number())) return {};
        return "'" + value + "' is not a " +
               (whole ? std::string("whole number in decimal (e.g. 16; not 0x10 or 010)")
                      : std::string("decimal number (e.g. 2, 1.5 or 1e6; not nan, inf or hex)"));
      },
      "", "DECIMAL");
}

}  // namespace

void require_decimal_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    // The value's type, before the ":..." its validators add.
    const std::string full = option->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    if (type == "INT" || type == "UINT") {
      option->check(decimal_validator(true));
    } else if (type == "FLOAT") {
      option->check(decimal_validator(false));
    }
  }
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) require_decimal_numbers(*sub);
}

}  // namespace rdmx::cli
