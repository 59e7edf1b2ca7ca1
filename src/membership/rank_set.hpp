// SPDX-License-Identifier: MIT
// A set of ranks of one communicator, as a bitmap: what a failure detector
// suspects and what the survivors agree has failed. It travels on the
// control mesh as its bitmap bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rdmx::membership {

class RankSet {
 public:
  RankSet() = default;
  explicit RankSet(int size) : size_(size), words_((static_cast<std::size_t>(size) + 63) / 64, 0) {}

  int size() const noexcept { return size_; }
  bool contains(int rank) const noexcept {
    return rank >= 0 && rank < size_ && (words_[rank / 64] >> (rank % 64) & 1u) != 0;
  }
  // True when `rank` was not in the set before.
  bool insert(int rank);
  // True when the union added a rank.
  bool merge(const RankSet& other);
  int count() const noexcept;
  bool empty() const noexcept { return count() == 0; }
  std::vector<int> members() const;
  // The ranks not in the set, in order: the survivors of a decision.
  std::vector<int> complement() const;
  bool operator==(const RankSet& other) const = default;

  // "2", "1, 5", "none".
  std::string to_string() const;
  // Little-endian bitmap bytes, (size + 7) / 8 of them.
  std::vector<std::uint8_t> encode() const;
  // nullopt when `bytes` is not a bitmap of `size` ranks (wrong length, or
  // bits set past the last rank).
  static std::optional<RankSet> decode(int size, std::span<const std::uint8_t> bytes);

 private:
  int size_ = 0;
  std::vector<std::uint64_t> words_;
};

}  // namespace rdmx::membership
