// SPDX-License-Identifier: MIT
#include "coll/link_probe.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "coll/algorithms.hpp"
#include "rdmx/error.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

constexpr core::FlagSetting kMeasure{
    "RDMX_COLL_MEASURE_LINKS", true,
    "collectives: measure the links between hosts of each communicator that spans several, at creation (a few "
    "small exchanges and two of 256 KiB), for the cost model that chooses algorithms; 0: the figures providers "
    "declare"};
RDMX_SETTING(kMeasure);

constexpr std::size_t kLarge = 256 * 1024;
constexpr int kSmallRounds = 5;
constexpr int kLargeRounds = 2;
constexpr std::uint64_t kProbeSeq = std::uint64_t{1} << 62;

using Clock = std::chrono::steady_clock;

// One exchange: `bytes` to `right`, as many from `left`; returns seconds.
double exchange(Links& links, int right, int left, void* out, void* in, std::size_t bytes, std::uint64_t number,
                std::chrono::milliseconds timeout) {
  Schedule s;
  add_send(s, {.peer = right, .src = out, .bytes = bytes, .in_place = true});
  add_recv(s, {.peer = left, .dst = in, .bytes = bytes});
  OpDesc desc;
  // Each exchange its own number, far above any collective's, so a
  // neighbour's next exchange that lands early waits for its own run.
  desc.seq = kProbeSeq + number;
  desc.op = CollOp::AllGather;
  desc.type = DataType::Uint8;
  desc.algo = Algo::Direct;
  desc.count = bytes;
  Combine combine;
  const auto start = Clock::now();
  links.run(s, desc, combine, timeout);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A step's latency (the fastest of a few small exchanges) and bandwidth
// (256 KiB in the time beyond that step), in the model's units.
LinkCost probe_pair(Links& links, int right, int left, char* buffer, std::chrono::milliseconds timeout) {
  double step = std::numeric_limits<double>::max();
  std::uint64_t n = 0;
  for (int i = 0; i < kSmallRounds; ++i) {
    step = std::min(step, exchange(links, right, left, buffer, buffer + kLarge, 8, n++, timeout));
  }
  // The first large exchange also touches the pages and the inbox: the faster of two.
  double large = std::numeric_limits<double>::max();
  for (int i = 0; i < kLargeRounds; ++i) {
    large = std::min(large, exchange(links, right, left, buffer, buffer + kLarge, kLarge, n++, timeout));
  }
  const double beyond = std::max(large - step, large / 2);
  return {.latency_us = step * 1e6, .bandwidth_gbps = static_cast<double>(kLarge) / beyond / 1e9};
}

std::string key_of(const std::string& tag, int rank) { return tag + "/links/" + std::to_string(rank); }

}  // namespace

bool measure_links_enabled() { return kMeasure.read(); }

LinkModel measure_links(Links& links, Store& store, const std::string& tag, const HostLayout& layout, int rank,
                        const LinkModel& declared, std::chrono::milliseconds timeout, std::string* published_key) {
  auto* buffer = static_cast<char*>(links.scratch(2 * kLarge));
  std::memset(buffer, 0, 2 * kLarge);
  LinkCost mine;
  std::string published;
  try {
    const Links::Driving driving(links);
    const int host = layout.host(rank);
    const std::vector<int>& local = layout.ranks[static_cast<std::size_t>(host)];
    const int hosts = layout.hosts();
    if (hosts > 1 && local.front() == rank) {
      published = key_of(tag, rank);
      *published_key = published;
      const int right = layout.ranks[static_cast<std::size_t>((host + 1) % hosts)].front();
      const int left = layout.ranks[static_cast<std::size_t>((host + hosts - 1) % hosts)].front();
      mine = probe_pair(links, right, left, buffer, timeout);
    }
    // The probing ranks' figures to every rank through the store (the
    // others may not enter a Links exchange while those still probe), so
    // all take the same. Host 0's leader alone reads every leader's and
    // publishes the least favourable under its own key, which every other
    // rank reads: one request each rather than one per host, since they
    // all arrive at once at one server.
    const auto publish = [&](const LinkCost& cost) {
      char text[64];
      std::snprintf(text, sizeof text, "%.17g:%.17g", cost.latency_us, cost.bandwidth_gbps);
      store.set(published, std::string_view(text));
    };
    const auto read = [&](int h) {
      const std::string text = store.get_string(key_of(tag, layout.ranks[static_cast<std::size_t>(h)].front()));
      LinkCost cost;
      if (std::sscanf(text.c_str(), "%lf:%lf", &cost.latency_us, &cost.bandwidth_gbps) != 2) {
        throw Error(ErrorCode::Protocol, "host " + std::to_string(h) + " published link figures '" + text + "'",
                    {.op = "communicator create", .rank = rank, .hint = "every rank must run the same rdmx version"});
      }
      return cost;
    };
    LinkModel out = declared;
    LinkCost between;
    if (host == 0 && !published.empty()) {
      take_least_favourable(between, mine);
      for (int h = 1; h < hosts; ++h) take_least_favourable(between, read(h));
      publish(between);
    } else {
      if (!published.empty()) publish(mine);
      between = read(0);
    }
    out.between_hosts = between;
    out.basis = "in-host declared, between hosts measured";
    return out;
  } catch (const Error& e) {
    throw Error(e.code(), "communicator create: measuring the links for the cost model: " + e.message(),
                {.op = "communicator create",
                 .rank = rank,
                 .hint = "RDMX_COLL_MEASURE_LINKS=0 uses the figures the providers declare"});
  }
}

}  // namespace rdmx::coll
