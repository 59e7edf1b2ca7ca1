// SPDX-License-Identifier: MIT
// Fuzz target: the addresses peers send each other through the store. A QP
// address (raw and as hex), an auto address bundle, the tcp and shm
// providers' decoders, and a rank's placement record, all from the same
// bytes. Each either decodes or throws rdmx::Error; nothing else is allowed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "coll/rank_placement.hpp"
#include "driver/address_bundle.hpp"
#include "providers/shm/address.hpp"
#include "providers/tcp/address.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace {

template <typename F>
void must_decode_or_refuse(F&& decode) {
  try {
    decode();
  } catch (const rdmx::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rdmx::QpAddress raw;
  raw.bytes.assign(data, data + size);
  must_decode_or_refuse([&] { (void)rdmx::tcp::TcpAddress::decode(raw).to_string(); });
  must_decode_or_refuse([&] { (void)rdmx::shm::ShmAddress::decode(raw); });
  must_decode_or_refuse([&] {
    for (const rdmx::QpAddress& part : rdmx::core::unbundle_addresses(raw)) (void)part.to_hex();
  });
  must_decode_or_refuse(
      [&] { (void)rdmx::core::part_for_provider(raw, [](const rdmx::QpAddress& a) { return !a.bytes.empty(); }); });
  const std::string text(reinterpret_cast<const char*>(data), size);
  must_decode_or_refuse([&] { (void)rdmx::tcp::TcpAddress::decode(rdmx::QpAddress::from_hex(text)); });
  must_decode_or_refuse([&] { (void)rdmx::coll::RankWhere::decode(text); });
  return 0;
}
