// SPDX-License-Identifier: MIT
// The control overlay: its shape for every size up to a few hundred, and
// the all-gather over it on real connected sockets, one thread per rank.
#include "membership/overlay.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <thread>

#include "rdmx/error.hpp"

namespace rdmx::membership {
namespace {

using namespace std::chrono_literals;

TEST(OverlayTest, NeighboursAreSymmetricLogarithmicAndConnected) {
  for (int size = 1; size <= 300; ++size) {
    std::vector<std::vector<int>> graph;
    for (int r = 0; r < size; ++r) graph.push_back(overlay_neighbours(r, size));
    const int bound = size == 1 ? 0 : 2 * static_cast<int>(std::ceil(std::log2(size)));
    for (int r = 0; r < size; ++r) {
      EXPECT_LE(static_cast<int>(graph[r].size()), bound) << "rank " << r << " of " << size;
      EXPECT_TRUE(std::is_sorted(graph[r].begin(), graph[r].end()));
      for (int q : graph[r]) {
        ASSERT_NE(q, r);
        ASSERT_TRUE(q >= 0 && q < size);
        EXPECT_TRUE(std::binary_search(graph[q].begin(), graph[q].end(), r)) << r << " -> " << q << " of " << size;
      }
    }
    std::vector<bool> reached(static_cast<std::size_t>(size));
    std::deque<int> todo{0};
    reached[0] = true;
    while (!todo.empty()) {
      const int r = todo.front();
      todo.pop_front();
      for (int q : graph[r]) {
        if (!reached[q]) todo.push_back(q), reached[q] = true;
      }
    }
    EXPECT_EQ(std::count(reached.begin(), reached.end(), true), size) << "the overlay of " << size << " is split";
  }
  EXPECT_EQ(overlay_neighbours(0, 256).size(), 15u);
  EXPECT_EQ(overlay_neighbours(3, 8), (std::vector<int>{1, 2, 4, 5, 7}));
}

// Connected socket pairs for every overlay edge of `size` ranks.
std::vector<std::vector<bootstrap::UniqueFd>> overlay_sockets(int size) {
  std::vector<std::vector<bootstrap::UniqueFd>> fds(static_cast<std::size_t>(size));
  for (auto& row : fds) row.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    for (int q : overlay_neighbours(r, size)) {
      if (q < r) continue;
      int pair[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair), 0);
      fds[r][q].reset(pair[0]);
      fds[q][r].reset(pair[1]);
    }
  }
  return fds;
}

TEST(OverlayTest, GatherGivesEveryRankEveryValueAndLeavesWhatFollowsUnread) {
  for (int size : {1, 2, 3, 5, 8, 13, 33}) {
    auto fds = overlay_sockets(size);
    std::vector<std::vector<std::string>> got(static_cast<std::size_t>(size));
    std::vector<std::string> errors(static_cast<std::size_t>(size));
    std::vector<std::string> after(static_cast<std::size_t>(size));
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r] {
        try {
          // Values of different lengths, one of them empty.
          const std::string mine = r == 1 ? "" : "rank " + std::to_string(r) + std::string(r % 7, '*');
          const auto deadline = core::Clock::now() + 10s;
          got[r] = gather_over_overlay(fds[r], r, size, mine, deadline);
          // What a rank sends once its exchange is done must reach each
          // neighbour intact, after that neighbour's exchange.
          for (int q : overlay_neighbours(r, size)) {
            const char mark = static_cast<char>('A' + r % 26);
            EXPECT_EQ(::send(fds[r][q].get(), &mark, 1, MSG_NOSIGNAL), 1);
          }
          for (int q : overlay_neighbours(r, size)) {
            char mark = 0;
            bool started = false;
            const auto result = bootstrap::recv_all(fds[r][q].get(), &mark, 1, deadline, started);
            after[r] += result.failure == bootstrap::IoFailure::None ? mark : '?';
          }
        } catch (const Error& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(errors[r], "") << "rank " << r << " of " << size;
      ASSERT_EQ(got[r].size(), static_cast<std::size_t>(size));
      for (int q = 0; q < size; ++q) {
        EXPECT_EQ(got[r][q], q == 1 ? "" : "rank " + std::to_string(q) + std::string(q % 7, '*'))
            << "rank " << r << " holds rank " << q << "'s value wrong, of " << size;
      }
      std::string expected;
      for (int q : overlay_neighbours(r, size)) expected += static_cast<char>('A' + q % 26);
      EXPECT_EQ(after[r], expected) << "rank " << r << " of " << size;
    }
  }
}

TEST(OverlayTest, AMalformedOrMissingMessageNamesThePeerAndStep) {
  auto fds = overlay_sockets(2);
  const char junk[16] = "not a message!!";
  ASSERT_EQ(::send(fds[1][0].get(), junk, sizeof(junk), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(junk)));
  try {
    gather_over_overlay(fds[0], 0, 2, "mine", core::Clock::now() + 5s);
    FAIL() << "a malformed message was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerFailure);
    EXPECT_NE(std::string(e.what()).find("step 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }

  auto silent = overlay_sockets(3);
  const auto start = core::Clock::now();
  try {
    gather_over_overlay(silent[0], 0, 3, "mine", start + 300ms);
    FAIL() << "a gather with silent peers returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_LT(core::Clock::now() - start, 5s);
}

}  // namespace
}  // namespace rdmx::membership
