// SPDX-License-Identifier: MIT
// Reading sysfs attributes: one value per file, a trailing newline, and
// files that fail to read (EINVAL for a link that is down) when a value does
// not apply, which callers treat as "unknown" rather than as an error.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace rdmx::topo {

// The file's text without its trailing newline; nullopt when it cannot be read.
std::optional<std::string> read_text(const std::string& path);
// The file as a base-0 integer ("42", "0x1c"); nullopt when unreadable or not a number.
std::optional<long long> read_integer(const std::string& path);

struct DirListing {
  bool exists = false;             // false: no such directory (ENOENT)
  std::string error;               // set when it exists but cannot be listed
  std::vector<std::string> names;  // without "." and "..", sorted (numbers numerically)
};
DirListing list_dir(const std::string& path);

}  // namespace rdmx::topo
