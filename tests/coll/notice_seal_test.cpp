// SPDX-License-Identifier: MIT
// A rank's notice (why it failed) is read by peers while it may still be
// landing, and may replace an earlier one. Every copy a reader can take
// mid-WRITE is modelled here: the bytes of the new notice land over the old
// one in address order (a provider with ordered_write_placement) or in any
// order of 8-byte pieces (one without). A reader takes a copy only when it
// is wholly the old notice or wholly the new one, never a mix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "coll/links_layout.hpp"

namespace rdmx::coll {
namespace {

using wire::Notice;

Notice sealed(ErrorCode code, std::uint64_t seq, const std::string& text) {
  Notice n;
  std::memset(&n, 0, sizeof(n));
  n.code = static_cast<std::uint32_t>(code);
  n.seq = seq;
  std::memcpy(n.text, text.data(), std::min(text.size(), sizeof(n.text) - 1));
  n.seal = wire::notice_seal(n);
  return n;
}

// Whether a reader takes the bytes it copied from the slot as a notice.
bool counts(const Notice& copy) { return copy.seal != 0 && wire::notice_seal(copy) == copy.seal; }

bool same(const Notice& a, const Notice& b) { return std::memcmp(&a, &b, sizeof(Notice)) == 0; }

Notice empty_slot() {
  Notice n;
  std::memset(&n, 0, sizeof(n));
  return n;
}

TEST(NoticeSeal, AnEmptySlotHoldsNoNoticeAndAWholeOneCounts) {
  EXPECT_FALSE(counts(empty_slot()));
  const Notice n = sealed(ErrorCode::Timeout, 7, "rank 2 did not enter allreduce #7 within 30 s");
  EXPECT_NE(n.seal, 0u);
  EXPECT_TRUE(counts(n));
}

TEST(NoticeSeal, AnyPrefixLandedInAddressOrderIsNeverTakenForAMix) {
  const Notice before[] = {empty_slot(), sealed(ErrorCode::Protocol, 3, "mismatch: rank 1 called broadcast")};
  const Notice after = sealed(ErrorCode::PeerFailure, 0, "aborted: stopping for the test");
  for (const Notice& old : before) {
    for (std::size_t landed = 0; landed <= sizeof(Notice); ++landed) {
      Notice copy = old;
      std::memcpy(&copy, &after, landed);
      if (!counts(copy)) continue;
      EXPECT_TRUE(same(copy, old) || same(copy, after)) << "a mix counted with " << landed << " bytes landed";
    }
    // The last 8 bytes complete it.
    Notice copy = old;
    std::memcpy(&copy, &after, sizeof(Notice));
    EXPECT_TRUE(counts(copy));
  }
}

TEST(NoticeSeal, PiecesLandedInAnyOrderAreNeverTakenForAMix) {
  const Notice old = sealed(ErrorCode::Timeout, 9, "rank 3 stopped inside reduce_scatter #9");
  const Notice after = sealed(ErrorCode::Timeout, 9, "rank 3 stopped inside reduce_scatter #9 (its beat stood)");
  constexpr std::size_t kPieces = sizeof(Notice) / 8;
  std::mt19937 random(2026);
  int mixes_refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::uint64_t order[kPieces];
    for (std::size_t i = 0; i < kPieces; ++i) order[i] = i;
    std::shuffle(std::begin(order), std::end(order), random);
    Notice copy = (trial % 2) ? old : empty_slot();
    const Notice start = copy;
    for (std::size_t k = 0; k < kPieces; ++k) {
      std::memcpy(reinterpret_cast<char*>(&copy) + order[k] * 8, reinterpret_cast<const char*>(&after) + order[k] * 8,
                  8);
      if (counts(copy)) {
        ASSERT_TRUE(same(copy, start) || same(copy, after))
            << "trial " << trial << ": a mix counted after " << k + 1 << " pieces";
      } else {
        ++mixes_refused;
      }
    }
    EXPECT_TRUE(counts(copy));
  }
  EXPECT_GT(mixes_refused, 0);
}

TEST(NoticeSeal, TextIsCutToFitAndStaysTerminated) {
  const Notice n = sealed(ErrorCode::Protocol, 1, std::string(1000, 'x'));
  EXPECT_TRUE(counts(n));
  EXPECT_EQ(strnlen(n.text, sizeof(n.text)), sizeof(n.text) - 1);
}

}  // namespace
}  // namespace rdmx::coll
