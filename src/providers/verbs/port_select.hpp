// SPDX-License-Identifier: MIT
// Which device, port and GID the verbs provider uses, decided from what the
// hardware reports and from RDMX_IB_HCA / RDMX_IB_GID_INDEX. Pure functions
// over plain data, so the rules are tested without a device.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "providers/verbs/address.hpp"

namespace rdmx::verbs {

// RDMX_IB_HCA, read as NCCL reads NCCL_IB_HCA: a comma-separated list of
// device[:port] entries; names match as prefixes unless the list starts with
// '=' (exact names); a leading '^' turns the list into an exclusion list
// ("^=mlx5_1" uses every device but mlx5_1). Empty: every device.
class HcaFilter {
 public:
  // Throws rdmx::Error (Config) for a malformed value.
  static HcaFilter parse(const std::string& text);
  bool admits(const std::string& device, int port) const;
  bool empty() const { return entries_.empty(); }
  const std::string& text() const { return text_; }

 private:
  struct Entry {
    std::string name;
    int port = 0;  // 0: any port
  };
  std::string text_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<Entry> entries_;
};

struct GidEntry {
  int index = 0;
  std::array<std::uint8_t, 16> gid{};
  GidType type = GidType::Ib;
  std::string netdev;  // RoCE: the netdev the GID belongs to
};
std::string describe(const GidEntry& entry);  // "1: ::ffff:10.0.0.1 RoCE v2 eth0"

struct GidChoice {
  GidEntry entry;
  std::string why;
};
// The GID a RoCE port uses: `forced` (RDMX_IB_GID_INDEX) when given, else a
// RoCE v2 GID with an IPv4-mapped address, else any RoCE v2 GID, else RoCE
// v1. Throws rdmx::Error listing the table and saying why nothing fits.
GidChoice choose_gid(const std::vector<GidEntry>& table, std::optional<int> forced, const std::string& where);

// Parses RDMX_IB_GID_INDEX (unset or "auto": nullopt). Throws Config when malformed.
std::optional<int> parse_gid_index(const std::optional<std::string>& text);

}  // namespace rdmx::verbs
