// SPDX-License-Identifier: MIT
// The agreement state machine, message by message: a simulated network
// delivers each sender's messages in order (as TCP does) but interleaves
// senders at random, ranks crash at random points (a crash in the middle of
// sending delivers only a prefix of what was sent), and the failure detector
// tells each survivor about each crash at a random later moment. Whatever
// the schedule, every survivor must decide, all on the same set, and that
// set may name only ranks that crashed.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "membership/agreement.hpp"
#include "rdmx/error.hpp"

namespace rdmx::membership {
namespace {

RankSet set_of(int size, std::initializer_list<int> ranks) {
  RankSet set(size);
  for (int r : ranks) set.insert(r);
  return set;
}

TEST(RankSetTest, EncodesDecodesAndRefusesMalformedBitmaps) {
  RankSet set = set_of(70, {0, 5, 64, 69});
  EXPECT_EQ(set.count(), 4);
  EXPECT_EQ(set.to_string(), "0, 5, 64, 69");
  auto bytes = set.encode();
  ASSERT_EQ(bytes.size(), 9u);
  auto back = RankSet::decode(70, bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, set);
  EXPECT_FALSE(RankSet::decode(71, bytes).has_value() && RankSet::decode(71, bytes)->size() == 70);
  EXPECT_FALSE(RankSet::decode(70, std::span(bytes).first(8)).has_value());
  bytes.back() |= 0x80;  // rank 71 of 70
  EXPECT_FALSE(RankSet::decode(70, bytes).has_value());
  EXPECT_EQ(RankSet(3).to_string(), "none");
  EXPECT_EQ(set.complement().size(), 66u);
  EXPECT_THROW(set.insert(70), Error);
}

TEST(RankSetTest, QuorumCountsSurvivorsAgainstTheOldGroup) {
  EXPECT_EQ(quorum_of(set_of(4, {2})), Quorum::Majority);
  EXPECT_EQ(quorum_of(set_of(4, {2, 3})), Quorum::Tie);
  EXPECT_EQ(quorum_of(set_of(4, {0, 1, 3})), Quorum::Minority);
  EXPECT_EQ(quorum_of(set_of(5, {1, 2})), Quorum::Majority);
  EXPECT_EQ(quorum_of(set_of(2, {1})), Quorum::Tie);
}

// One simulated run.
struct Network {
  struct InFlight {
    int from;
    int to;
    AgreementMessage message;
  };
  explicit Network(int n, std::uint64_t seed) : random(seed) {
    for (int r = 0; r < n; ++r) nodes.emplace_back(r, n);
    crashed.assign(n, false);
    told.assign(n, std::vector<bool>(n, false));
    queues.resize(static_cast<std::size_t>(n) * n);
  }

  std::deque<AgreementMessage>& queue(int from, int to) { return queues[from * nodes.size() + to]; }

  void flush(int r) {
    for (auto& out : nodes[r].take_outgoing()) queue(r, out.to).push_back(out.message);
  }

  // Crashes `r`; of what it had queued and not yet delivered, a random
  // suffix per destination is lost (it never left the dead process).
  void crash(int r) {
    crashed[r] = true;
    for (std::size_t to = 0; to < nodes.size(); ++to) {
      auto& q = queue(r, static_cast<int>(to));
      if (q.empty()) continue;
      std::uniform_int_distribution<std::size_t> keep(0, q.size());
      q.resize(keep(random));
    }
  }

  // One random step: deliver one message, or tell one survivor about one
  // crash. Returns false when nothing is left to do.
  bool step() {
    std::vector<std::pair<int, int>> channels;
    std::vector<std::pair<int, int>> notices;
    const int n = static_cast<int>(nodes.size());
    for (int from = 0; from < n; ++from) {
      for (int to = 0; to < n; ++to) {
        if (!queue(from, to).empty() && !crashed[to]) channels.push_back({from, to});
        if (crashed[from] && !crashed[to] && !told[to][from]) notices.push_back({to, from});
      }
    }
    if (channels.empty() && notices.empty()) return false;
    std::uniform_int_distribution<std::size_t> pick(0, channels.size() + notices.size() - 1);
    std::size_t i = pick(random);
    if (i < channels.size()) {
      auto [from, to] = channels[i];
      AgreementMessage message = queue(from, to).front();
      queue(from, to).pop_front();
      nodes[to].receive(from, message);
      flush(to);
    } else {
      auto [to, dead] = notices[i - channels.size()];
      told[to][dead] = true;
      nodes[to].suspect(dead);
      flush(to);
    }
    return true;
  }

  std::mt19937_64 random;
  std::vector<Agreement> nodes;
  std::vector<bool> crashed;
  std::vector<std::vector<bool>> told;
  std::vector<std::deque<AgreementMessage>> queues;
};

// Runs one schedule: `first` ranks crash before anything happens; `late`
// more crash at random steps of the agreement itself.
std::string run_schedule(int n, int first, int late, std::uint64_t seed) {
  Network net(n, seed);
  std::vector<int> order(n);
  for (int r = 0; r < n; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), net.random);
  for (int i = 0; i < first; ++i) net.crash(order[i]);
  std::vector<int> late_victims(order.begin() + first, order.begin() + first + late);
  std::uniform_int_distribution<int> when(0, 6 * n);
  std::vector<int> at(late_victims.size());
  for (auto& a : at) a = when(net.random);
  if (first == 0) {
    // Nobody has died yet: one rank starts, as an application asking to shrink.
    net.nodes[order[n - 1]].start();
    net.flush(order[n - 1]);
  }
  for (int steps = 0; steps < 100'000; ++steps) {
    for (std::size_t v = 0; v < late_victims.size(); ++v) {
      if (at[v] == steps && !net.crashed[late_victims[v]]) net.crash(late_victims[v]);
    }
    if (!net.step()) break;
  }
  std::string why;
  const RankSet* agreed = nullptr;
  for (int r = 0; r < n; ++r) {
    if (net.crashed[r]) continue;
    const Agreement& node = net.nodes[r];
    if (node.excluded())
      return "rank " + std::to_string(r) + " (alive) was declared failed by rank " + std::to_string(node.excluded_by());
    if (!node.decided()) {
      return "rank " + std::to_string(r) + " did not decide; round " + std::to_string(node.round()) + ", suspects " +
             node.suspects().to_string();
    }
    for (int m : node.decision().members()) {
      if (!net.crashed[m])
        return "rank " + std::to_string(r) + " decided that live rank " + std::to_string(m) + " failed";
    }
    if (agreed == nullptr) {
      agreed = &node.decision();
    } else if (!(*agreed == node.decision())) {
      return "rank " + std::to_string(r) + " decided " + node.decision().to_string() + ", another " +
             agreed->to_string();
    }
  }
  (void)why;
  return "";
}

TEST(AgreementTest, OneDeathIsAgreedInOneRoundWhenEveryoneSawIt) {
  std::vector<Agreement> nodes;
  for (int r = 0; r < 4; ++r) nodes.emplace_back(r, 4);
  for (int r : {0, 1, 3}) nodes[r].suspect(2);
  std::vector<AddressedMessage> out[4];
  for (int r : {0, 1, 3}) out[r] = nodes[r].take_outgoing();
  for (int r : {0, 1, 3}) {
    ASSERT_EQ(out[r].size(), 2u) << "rank " << r << " sends round 1 to the two other survivors";
    for (auto& m : out[r]) {
      EXPECT_NE(m.to, 2);
      nodes[m.to].receive(r, m.message);
    }
  }
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(nodes[r].decided()) << r;
    EXPECT_EQ(nodes[r].decision(), set_of(4, {2}));
    EXPECT_EQ(nodes[r].round(), 1u);
    EXPECT_EQ(nodes[r].reported_by(2), r);
  }
}

TEST(AgreementTest, ASuspicionHeardFromAPeerIsAdoptedAndNamesWhoReportedIt) {
  std::vector<Agreement> nodes;
  for (int r = 0; r < 3; ++r) nodes.emplace_back(r, 3);
  nodes[0].suspect(2);
  auto out = nodes[0].take_outgoing();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, 1);
  nodes[1].receive(0, out[0].message);
  EXPECT_TRUE(nodes[1].suspects().contains(2));
  EXPECT_EQ(nodes[1].reported_by(2), 0);
  // Rank 1 has everything it waits for at once: its round 1, then its decision.
  auto back = nodes[1].take_outgoing();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(nodes[1].decided());
  for (auto& m : back) {
    EXPECT_EQ(m.to, 0);
    nodes[0].receive(1, m.message);
  }
  EXPECT_TRUE(nodes[0].decided());
  EXPECT_TRUE(nodes[1].decided());
  EXPECT_EQ(nodes[1].decision(), set_of(3, {2}));
}

TEST(AgreementTest, ARankNamedInAPeersSetIsExcludedAndStops) {
  Agreement node(1, 3);
  AgreementMessage message;
  message.round = 1;
  message.set = set_of(3, {1});
  node.receive(0, message);
  EXPECT_TRUE(node.excluded());
  EXPECT_EQ(node.excluded_by(), 0);
  EXPECT_FALSE(node.decided());
  EXPECT_TRUE(node.take_outgoing().empty());
}

TEST(AgreementTest, MessagesOfTheWrongSizeOrFromOutsideAreIgnored) {
  Agreement node(0, 3);
  AgreementMessage message;
  message.round = 1;
  message.set = set_of(4, {3});
  node.receive(1, message);
  node.receive(7, message);
  node.receive(-1, message);
  EXPECT_FALSE(node.active());
  EXPECT_TRUE(node.take_outgoing().empty());
}

TEST(AgreementTest, StartingWithNoFailureAgreesOnTheEmptySet) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    EXPECT_EQ(run_schedule(5, 0, 0, seed), "") << "seed " << seed;
  }
}

TEST(AgreementTest, RandomSchedulesWithDeathsBeforeAndDuringAgreementAllDecideTheSameSet) {
  struct Case {
    int n, first, late;
  };
  const Case cases[] = {{3, 1, 0}, {4, 1, 0}, {4, 2, 0}, {4, 1, 1},  {6, 1, 2}, {8, 2, 2},
                        {8, 1, 3}, {8, 0, 3}, {5, 3, 1}, {16, 3, 4}, {2, 1, 0}};
  for (const Case& c : cases) {
    for (std::uint64_t seed = 1; seed <= 400; ++seed) {
      const std::string problem = run_schedule(c.n, c.first, c.late, seed * 7919 + c.n);
      ASSERT_EQ(problem, "") << c.n << " ranks, " << c.first << " dead before, " << c.late << " during, seed " << seed;
    }
  }
}

}  // namespace
}  // namespace rdmx::membership
