// SPDX-License-Identifier: MIT
// Text helpers the test areas share: whether a message says something, how
// often, a store value from a string, a word in hex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "rdmx/bootstrap.hpp"

namespace rdmx::test {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// How often `needle` occurs in `haystack`, without overlaps.
inline std::size_t occurrences(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + needle.size())) ++n;
  return n;
}

inline Bytes bytes_of(std::string_view text) { return Bytes(text.begin(), text.end()); }

inline std::string hex(std::uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

}  // namespace rdmx::test
