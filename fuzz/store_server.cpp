// SPDX-License-Identifier: MIT
// Fuzz target: the TCP store server's reading of a client's bytes. The input
// is what a connection sends after its proof: requests are parsed off its
// front, as the server does, until one is malformed or incomplete. Each
// complete request must carry its operation's argument count within bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/tcp_store_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmx::bootstrap;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t offset = 0;
  for (int requests = 0; requests < 1024 && offset < input.size(); ++requests) {
    std::size_t consumed = 0;
    Request request;
    std::string why;
    const ParseResult result = parse_request(input.substr(offset), consumed, request, why);
    if (result != ParseResult::Complete) {
      if (result == ParseResult::Malformed && why.empty()) __builtin_trap();  // a refusal must say why
      break;
    }
    if (consumed == 0 || consumed > input.size() - offset) __builtin_trap();
    for (const std::string& arg : request.args) {
      if (arg.size() > wire::kMaxFrameArgBytes) __builtin_trap();
    }
    offset += consumed;
  }
  return 0;
}
