// SPDX-License-Identifier: MIT
#include "providers/verbs/port_select.hpp"

#include <algorithm>

#include "rdmx/error.hpp"

namespace rdmx::verbs {
namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

[[noreturn]] void bad_hca(const std::string& text, const std::string& why) {
  throw Error(ErrorCode::Config, "RDMX_IB_HCA=\"" + text + "\" is malformed: " + why,
              {.op = "open_device verbs",
               .hint = "write device[:port] entries separated by commas, e.g. mlx5_0:1,mlx5_1 ; a leading = "
                       "matches names exactly, a leading ^ excludes them (see `rdmx info` for the devices)"});
}

}  // namespace

HcaFilter HcaFilter::parse(const std::string& raw) {
  HcaFilter f;
  f.text_ = raw;
  std::string text = trim(raw);
  if (!text.empty() && text[0] == '^') {
    f.exclude_ = true;
    text.erase(0, 1);
  }
  if (!text.empty() && text[0] == '=') {
    f.exact_ = true;
    text.erase(0, 1);
  }
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    std::size_t comma = text.find(',', start);
    std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) bad_hca(raw, "an empty entry");
    Entry e;
    if (auto colon = item.find(':'); colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      if (port.empty() || port.size() > 3 || !std::all_of(port.begin(), port.end(), ::isdigit) || std::stoi(port) < 1) {
        bad_hca(raw, "port \"" + port + "\" of \"" + item + "\" is not a port number (1, 2, ...)");
      }
      e.port = std::stoi(port);
      e.name = item.substr(0, colon);
    } else {
      e.name = item;
    }
    if (e.name.empty()) bad_hca(raw, "an entry without a device name");
    f.entries_.push_back(e);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if ((f.exclude_ || f.exact_) && f.entries_.empty()) bad_hca(raw, "no device after the ^ or =");
  return f;
}

bool HcaFilter::admits(const std::string& device, int port) const {
  if (entries_.empty()) return true;
  bool listed = false;
  for (const auto& e : entries_) {
    const bool name_matches = exact_ ? device == e.name : device.rfind(e.name, 0) == 0;
    if (name_matches && (e.port == 0 || e.port == port)) listed = true;
  }
  return exclude_ ? !listed : listed;
}

std::string describe(const GidEntry& entry) {
  std::string out = std::to_string(entry.index) + ": " + gid_to_string(entry.gid) + " " + to_string(entry.type);
  if (!entry.netdev.empty()) out += " " + entry.netdev;
  return out;
}

std::optional<int> parse_gid_index(const std::optional<std::string>& text) {
  if (!text || text->empty() || *text == "auto") return std::nullopt;
  const std::string& t = *text;
  if (t.size() > 4 || !std::all_of(t.begin(), t.end(), ::isdigit)) {
    throw Error(ErrorCode::Config, "RDMX_IB_GID_INDEX=\"" + t + "\" is not a GID table index",
                {.op = "open_device verbs",
                 .hint = "use a number from the port's GID table (`rdmx info` lists it), or unset it to let rdmx "
                         "choose a RoCE v2 GID"});
  }
  return std::stoi(t);
}

GidChoice choose_gid(const std::vector<GidEntry>& table, std::optional<int> forced, const std::string& where) {
  std::string listing;
  for (const auto& e : table) listing += (listing.empty() ? "" : "; ") + describe(e);
  if (listing.empty()) listing = "none (the GID table is empty: has the netdev an address, is the port up?)";
  if (forced) {
    auto it = std::find_if(table.begin(), table.end(), [&](const GidEntry& e) { return e.index == *forced; });
    if (it == table.end()) {
      throw Error(ErrorCode::Config, "RDMX_IB_GID_INDEX=" + std::to_string(*forced) + " names no valid GID on " + where,
                  {.op = "open_device verbs",
                   .sizes = "GIDs: " + listing,
                   .hint = "pick one of the listed indices (RoCE v2 with an IPv4 address is what most fabrics "
                           "route), or unset RDMX_IB_GID_INDEX"});
    }
    return {*it, "RDMX_IB_GID_INDEX=" + std::to_string(*forced) + " (" + describe(*it) + ")"};
  }
  auto pick = [&](auto&& pred) { return std::find_if(table.begin(), table.end(), pred); };
  auto it = pick([](const GidEntry& e) { return e.type == GidType::RoceV2 && is_ipv4_mapped(e.gid); });
  if (it != table.end()) return {*it, "GID " + describe(*it) + ": RoCE v2 with an IPv4 address, preferred"};
  it = pick([](const GidEntry& e) { return e.type == GidType::RoceV2; });
  if (it != table.end()) {
    return {*it, "GID " + describe(*it) +
                     ": RoCE v2 (no IPv4-mapped RoCE v2 GID; give the netdev an IPv4 "
                     "address for one that routes across subnets)"};
  }
  it = pick([](const GidEntry& e) { return e.type == GidType::RoceV1 || e.type == GidType::Ib; });
  if (it != table.end()) {
    return {*it, "GID " + describe(*it) + ": RoCE v1, the only kind this port has (v1 does not cross IP subnets)"};
  }
  throw Error(ErrorCode::NotFound, "no usable RoCE GID on " + where,
              {.op = "open_device verbs",
               .sizes = "GIDs: " + listing,
               .hint = "give the port's netdev an IP address (ip addr add ...), check it is up, or set "
                       "RDMX_IB_GID_INDEX"});
}

}  // namespace rdmx::verbs
