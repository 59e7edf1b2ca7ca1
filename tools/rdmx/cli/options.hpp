// SPDX-License-Identifier: MIT
// What several subcommands share (perf, run, plan): size lists, provider
// names and JSON lines.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rdmx::cli {

// A malformed value on the command line; the caller turns it into a usage error.
struct UsageError {
  std::string message;
};

// The largest size a command that allocates its buffers takes; one that
// only models a size (rdmx plan) passes kModelledSizeMax, as nccl-tests users
// sweep to 8-16 GiB.
inline constexpr std::size_t kBufferSizeMax = std::size_t{1} << 32;
inline constexpr std::size_t kModelledSizeMax = std::size_t{1} << 40;

// "8", "64K", "16M", "1G": binary multiples, as perftest and nccl-tests read them.
std::size_t parse_size(const std::string& text, const std::string& option, std::size_t max = kBufferSizeMax);
// A comma list of sizes, or a doubling range LO..HI.
std::vector<std::size_t> parse_size_list(const std::string& text, const std::string& option,
                                         std::size_t max = kBufferSizeMax);
std::vector<std::size_t> powers_of_two(std::size_t low, std::size_t high);

// --provider's check: a provider built into the library, or "auto"; anything
// else is a usage error before any rank starts.
CLI::Validator provider_names();

// Appends one JSON object per line to a file; does nothing without a path.
class JsonLines {
 public:
  JsonLines(const std::string& path, const char* option);
  ~JsonLines();
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;
  void write(const nlohmann::json& object);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace rdmx::cli
