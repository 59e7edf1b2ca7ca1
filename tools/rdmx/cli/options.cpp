// SPDX-License-Identifier: MIT
#include "cli/options.hpp"

#include <cerrno>
#include <cstring>

#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli {

std::size_t parse_size(const std::string& text, const std::string& option, std::size_t max) {
  std::string digits = text;
  unsigned shift = 0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k': shift = 10; break;
      case 'M':
      case 'm': shift = 20; break;
      case 'G':
      case 'g': shift = 30; break;
      default: break;
    }
  }
  if (shift != 0) digits.pop_back();
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError{option + ": '" + text + "' is not a size (e.g. 8, 64K, 16M, 1G)"};
  }
  const std::size_t value = std::stoull(digits);
  // Compared before the shift, which would wrap "999999999999G" to a small size.
  if (value > (max >> shift)) {
    throw UsageError{option + ": " + text + " is larger than " + std::to_string(max >> 30) + " GiB" +
                     (max == kBufferSizeMax ? ", the most a buffer here may hold" : "")};
  }
  return value << shift;
}

std::vector<std::size_t> powers_of_two(std::size_t low, std::size_t high) {
  std::vector<std::size_t> sizes;
  for (std::size_t size = low; size <= high && size != 0; size *= 2) sizes.push_back(size);
  return sizes;
}

std::vector<std::size_t> parse_size_list(const std::string& text, const std::string& option, std::size_t max) {
  if (const auto dots = text.find(".."); dots != std::string::npos) {
    const std::size_t low = parse_size(text.substr(0, dots), option, max);
    const std::size_t high = parse_size(text.substr(dots + 2), option, max);
    if (low == 0 || high < low) throw UsageError{option + ": the range '" + text + "' is empty or starts at 0"};
    return powers_of_two(low, high);
  }
  std::vector<std::size_t> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::size_t size = parse_size(text.substr(start, comma - start), option, max);
    if (size == 0) throw UsageError{option + ": sizes start at 1 byte"};
    sizes.push_back(size);
    start = comma + 1;
  }
  return sizes;
}

CLI::Validator provider_names() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        std::string known = "auto";
        for (const auto& name : available_providers()) {
          if (value == name) return {};
          known += ", " + name;
        }
        if (value == "auto") return {};
        return "unknown provider \"" + value + "\" (built: " + known + "; rdmx info says which work here)";
      },
      "PROVIDER");
}

JsonLines::JsonLines(const std::string& path, const char* option) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    throw Error(ErrorCode::System,
                std::string("cannot open the ") + option + " file '" + path + "': " + std::strerror(errno),
                {.hint = "give a path in a writable directory"});
  }
}

JsonLines::~JsonLines() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLines::write(const nlohmann::json& object) {
  if (file_ == nullptr) return;
  std::fprintf(file_, "%s\n", object.dump().c_str());
  std::fflush(file_);
}

}  // namespace rdmx::cli
