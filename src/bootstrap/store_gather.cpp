// SPDX-License-Identifier: MIT
#include "bootstrap/store_gather.hpp"

#include <algorithm>
#include <cstdlib>

#include "rdmx/error.hpp"

namespace rdmx::bootstrap {
namespace {

// Each rank gathers for the ranks below it in a tree of this fan-in, so
// rank 0 makes kFanIn gets, not N, and a rank waits for log_kFanIn(N) levels.
constexpr int kFanIn = 16;

std::string rank_key(const std::string& key, int rank) { return key + "/" + std::to_string(rank); }

// Entries "<rank>:<length>:<bytes>", since the values may hold any byte.
void append(std::string& out, int rank, const std::string& value) {
  out += std::to_string(rank) + ":" + std::to_string(value.size()) + ":" + value;
}

// Fills `all` from `text`; false when it is malformed or names a rank twice.
bool take(const std::string& text, std::vector<std::string>& all, std::vector<bool>& seen) {
  std::size_t at = 0;
  while (at < text.size()) {
    char* end = nullptr;
    const unsigned long long rank = std::strtoull(text.c_str() + at, &end, 10);
    if (end == text.c_str() + at || *end != ':' || rank >= all.size() || seen[rank]) return false;
    const char* length_at = end + 1;
    const unsigned long long length = std::strtoull(length_at, &end, 10);
    const std::size_t value_at = static_cast<std::size_t>(end - text.c_str()) + 1;
    if (end == length_at || *end != ':' || length > text.size() - value_at) return false;
    all[rank] = text.substr(value_at, length);
    seen[rank] = true;
    at = value_at + length;
  }
  return true;
}

}  // namespace

std::vector<std::string> gather_through_store(Store& store, const std::string& key, int rank, int size,
                                              const std::string& mine, const char* what, const char* op,
                                              core::Clock::time_point deadline) {
  if (size == 1) return {mine};
  const auto left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - core::Clock::now()),
                    std::chrono::milliseconds(1));
  };
  const auto failed = [&](ErrorCode code, const std::string& why, int from) {
    return Error(code, std::string(op) + ": " + why,
                 {.op = op,
                  .rank = rank,
                  .peer_rank = from,
                  .hint = "a rank that never publishes it did not reach this step (crashed, hung, or another tag or "
                          "store), or runs another rdmx version"});
  };

  // What this rank and the ranks below it publish, children first.
  std::vector<std::string> children;
  for (int c = rank * kFanIn + 1; c <= rank * kFanIn + kFanIn && c < size; ++c) children.push_back(rank_key(key, c));
  std::string subtree;
  append(subtree, rank, mine);
  if (!children.empty()) {
    try {
      store.wait(children, left());
    } catch (const Error& e) {
      std::string missing;
      for (const std::string& child : children) {
        if (!store.check(child)) missing += (missing.empty() ? "" : ", ") + child.substr(key.size() + 1);
      }
      throw failed(e.code(),
                   "no " + std::string(what) + " from ranks " +
                       (missing.empty() ? "below rank " + std::to_string(rank) : missing) +
                       " (rank r gathers it for ranks r*" + std::to_string(kFanIn) + "+1 to r*" +
                       std::to_string(kFanIn) + "+" + std::to_string(kFanIn) +
                       " and theirs: the one missing may be below them): " + e.message(),
                   -1);
    }
    for (const std::string& child : children) subtree += store.get_string(child);
  }

  std::string whole;
  if (rank == 0) {
    whole = subtree;
    store.set(key, std::string_view(whole));
  } else {
    store.set(rank_key(key, rank), std::string_view(subtree));
    try {
      const Bytes value = store.get(key, left());
      whole.assign(value.begin(), value.end());
    } catch (const Error& e) {
      throw failed(e.code(),
                   "no " + std::string(what) + " of the ranks from rank 0, which gathers them: " + e.message(), 0);
    }
    // The whole is out, so the rank above has read this rank's part.
    store.remove(rank_key(key, rank));
  }
  std::vector<std::string> all(static_cast<std::size_t>(size));
  std::vector<bool> seen(static_cast<std::size_t>(size));
  if (!take(whole, all, seen) || std::find(seen.begin(), seen.end(), false) != seen.end()) {
    throw failed(ErrorCode::Protocol,
                 "the " + std::string(what) + " of the ranks gathered through the store under '" + key +
                     "' is not one entry per rank",
                 -1);
  }
  if (store.add(key + "/read", 1) == size) {
    store.remove(key);
    store.remove(key + "/read");
  }
  return all;
}

}  // namespace rdmx::bootstrap
