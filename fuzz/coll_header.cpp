// SPDX-License-Identifier: MIT
// Fuzz target: what the collectives read that a peer wrote into this rank's
// memory: a message header, a progress block (copied by RDMA READ while its
// owner may be writing it) and an error notice. Each is turned into the
// description an error message gives, whatever its fields hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "coll/links_layout.hpp"
#include "coll/op_desc.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rdmx::coll;
  wire::WireHeader header{};
  wire::Progress progress{};
  wire::Notice notice{};
  std::memcpy(&header, data, std::min(size, sizeof(header)));
  if (size > sizeof(header))
    std::memcpy(&progress, data + sizeof(header), std::min(size - sizeof(header), sizeof(progress)));
  if (size > sizeof(header) + sizeof(progress)) {
    std::memcpy(&notice, data + sizeof(header) + sizeof(progress),
                std::min(size - sizeof(header) - sizeof(progress), sizeof(notice)));
  }
  const std::string theirs = describe(wire::described_call(header, header.seq));
  const std::string stalled = describe(wire::described_call(progress, progress.entered));
  const std::string text(notice.text, strnlen(notice.text, sizeof(notice.text)));
  if (theirs.empty() || stalled.empty() || text.size() > sizeof(notice.text)) __builtin_trap();
  return 0;
}
