// SPDX-License-Identifier: MIT
#include "bootstrap/store_data.hpp"

#include <algorithm>

#include "services/settings.hpp"

namespace rdmx::bootstrap {
namespace {

constexpr core::SizeSetting kMaxBytes{
    "RDMX_STORE_MAX_BYTES", std::size_t{1} << 30,
    "TCP store server: keys and values it holds in all; a write beyond is refused (store full)"};
RDMX_SETTING(kMaxBytes);
constexpr core::SizeSetting kMaxClientBytes{
    "RDMX_STORE_MAX_CLIENT_BYTES", std::size_t{256} << 20,
    "TCP store server: keys and values one client connection may hold (those it wrote last)"};
RDMX_SETTING(kMaxClientBytes);

std::string megabytes(std::size_t bytes) { return std::to_string((bytes + (std::size_t{1} << 20) - 1) >> 20) + " MiB"; }

}  // namespace

StoreData::Limits StoreData::limits_from_settings() { return Limits{kMaxBytes.read(), kMaxClientBytes.read()}; }

const std::string* StoreData::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.value;
}

std::size_t StoreData::bytes_of(std::uint64_t client) const {
  auto it = by_client_.find(client);
  return it == by_client_.end() ? 0 : it->second;
}

void StoreData::uncharge(std::uint64_t client, std::size_t bytes) {
  auto it = by_client_.find(client);
  if (it == by_client_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) by_client_.erase(it);
}

std::string StoreData::put(std::uint64_t client, const std::string& key, std::string value) {
  const std::size_t added = cost(key, value);
  auto it = entries_.find(key);
  // What the write frees: the entry it replaces, and (when this client wrote it) this client's share.
  const std::size_t replaced = it == entries_.end() ? 0 : cost(key, it->second.value);
  const std::size_t own_replaced = it != entries_.end() && it->second.client == client ? replaced : 0;
  if (bytes_ - replaced + added > limits_.total) {
    return "the store is full: it holds " + megabytes(bytes_) + " in " + std::to_string(entries_.size()) +
           " keys, and this write of " + std::to_string(value.size()) + " bytes would pass RDMX_STORE_MAX_BYTES (" +
           megabytes(limits_.total) + ")";
  }
  if (bytes_of(client) - own_replaced + added > limits_.per_client) {
    return "this client holds " + megabytes(bytes_of(client)) + " of the store, and this write of " +
           std::to_string(value.size()) + " bytes would pass RDMX_STORE_MAX_CLIENT_BYTES (" +
           megabytes(limits_.per_client) + ")";
  }
  if (it == entries_.end()) {
    entries_.emplace(key, Entry{std::move(value), client});
  } else {
    uncharge(it->second.client, replaced);
    it->second = Entry{std::move(value), client};
  }
  bytes_ = bytes_ - replaced + added;
  by_client_[client] += added;
  return {};
}

std::vector<std::string> StoreData::keys_after(const std::string& prefix, const std::string& after,
                                               std::size_t most) const {
  std::vector<std::string> found;
  for (const auto& [key, entry] : entries_) {
    if (key.starts_with(prefix) && key > after) found.push_back(key);
  }
  const std::size_t kept = std::min(most, found.size());
  std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(kept), found.end());
  found.resize(kept);
  return found;
}

bool StoreData::erase(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  const std::size_t freed = cost(key, it->second.value);
  uncharge(it->second.client, freed);
  bytes_ -= freed;
  entries_.erase(it);
  return true;
}

}  // namespace rdmx::bootstrap
