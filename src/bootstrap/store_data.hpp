// SPDX-License-Identifier: MIT
// The TCP store server's keys and values, with the memory they take bounded
// in all (RDMX_STORE_MAX_BYTES) and per client connection
// (RDMX_STORE_MAX_CLIENT_BYTES): one client that floods the store with keys
// or huge values is refused before it takes the host's memory, and the
// others keep their room. Each entry is charged to the client that wrote it
// last, as key + value + a fixed overhead for the map's own node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace rdmx::bootstrap {

class StoreData {
 public:
  struct Limits {
    std::size_t total;       // every entry's cost, in all
    std::size_t per_client;  // the entries one client wrote last
  };
  // What an entry costs beyond its key and value (the map's node, the strings' headers).
  static constexpr std::size_t kEntryOverhead = 96;
  static Limits limits_from_settings();

  explicit StoreData(Limits limits) : limits_(limits) {}

  const std::string* find(const std::string& key) const;
  bool contains(const std::string& key) const { return entries_.contains(key); }
  // Sets `key` to `value` for `client`. Returns "" when done, else why it
  // was refused (the store is unchanged then).
  std::string put(std::uint64_t client, const std::string& key, std::string value);
  bool erase(const std::string& key);

  // Up to `most` keys that begin with `prefix` and sort after `after`, in order.
  std::vector<std::string> keys_after(const std::string& prefix, const std::string& after, std::size_t most) const;

  std::size_t bytes() const { return bytes_; }
  std::size_t bytes_of(std::uint64_t client) const;
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string value;
    std::uint64_t client;
  };
  static std::size_t cost(const std::string& key, const std::string& value) {
    return key.size() + value.size() + kEntryOverhead;
  }
  void uncharge(std::uint64_t client, std::size_t bytes);

  Limits limits_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::uint64_t, std::size_t> by_client_;
  std::size_t bytes_ = 0;
};

}  // namespace rdmx::bootstrap
