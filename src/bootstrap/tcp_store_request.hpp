// SPDX-License-Identifier: MIT
// The TCP store server's parsing of client requests. Bytes from clients are
// untrusted: every field is checked against its operation's bounds as soon
// as it arrives, before the rest of the request is waited for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/tcp_store_protocol.hpp"

namespace rdmx::bootstrap {

struct Request {
  wire::Op op = wire::Op::Hello;
  std::uint64_t id = 0;
  std::int64_t timeout_ms = -1;
  std::vector<std::string> args;
};

enum class ParseResult { NeedMore, Malformed, Complete };

// Parses one request from the front of `data`: Complete (with `consumed`
// bytes used and `out` filled), NeedMore, or Malformed (with `why`).
ParseResult parse_request(std::string_view data, std::size_t& consumed, Request& out, std::string& why);

}  // namespace rdmx::bootstrap
