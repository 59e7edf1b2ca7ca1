// SPDX-License-Identifier: MIT
#include "membership/rank_set.hpp"

#include <bit>

#include "rdmx/error.hpp"

namespace rdmx::membership {

bool RankSet::insert(int rank) {
  if (rank < 0 || rank >= size_) {
    throw Error(ErrorCode::InvalidArgument,
                "rank " + std::to_string(rank) + " is outside a group of " + std::to_string(size_) + " ranks");
  }
  std::uint64_t& word = words_[rank / 64];
  const std::uint64_t bit = std::uint64_t{1} << (rank % 64);
  const bool added = (word & bit) == 0;
  word |= bit;
  return added;
}

bool RankSet::merge(const RankSet& other) {
  bool added = false;
  for (std::size_t i = 0; i < words_.size() && i < other.words_.size(); ++i) {
    const std::uint64_t before = words_[i];
    words_[i] |= other.words_[i];
    added = added || words_[i] != before;
  }
  return added;
}

int RankSet::count() const noexcept {
  int total = 0;
  for (std::uint64_t word : words_) total += std::popcount(word);
  return total;
}

std::vector<int> RankSet::members() const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (contains(r)) out.push_back(r);
  }
  return out;
}

std::vector<int> RankSet::complement() const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (!contains(r)) out.push_back(r);
  }
  return out;
}

std::string RankSet::to_string() const {
  std::string out;
  for (int r : members()) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

std::vector<std::uint8_t> RankSet::encode() const {
  std::vector<std::uint8_t> out((static_cast<std::size_t>(size_) + 7) / 8, 0);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(words_[i / 8] >> (8 * (i % 8)));
  return out;
}

std::optional<RankSet> RankSet::decode(int size, std::span<const std::uint8_t> bytes) {
  if (size < 0 || bytes.size() != (static_cast<std::size_t>(size) + 7) / 8) return std::nullopt;
  RankSet set(size);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    set.words_[i / 8] |= std::uint64_t{bytes[i]} << (8 * (i % 8));
  }
  if (size % 8 != 0 && !bytes.empty() && (bytes.back() >> (size % 8)) != 0) return std::nullopt;
  return set;
}

}  // namespace rdmx::membership
