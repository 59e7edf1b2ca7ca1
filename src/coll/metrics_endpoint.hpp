// SPDX-License-Identifier: MIT
// An opt-in Prometheus endpoint per process (RDMX_METRICS_PORT): plain
// HTTP, GET /metrics, the text exposition format. It serves what each live
// communicator of the process counts (collectives, bytes and seconds per
// operation, bytes per peer, seconds since the last progress), read from
// the flight recorders and the links' counters when scraped: a collective
// pays for no metric beyond a few relaxed additions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "coll/flight_recorder.hpp"
#include "coll/rank_status.hpp"

namespace rdmx::coll {

struct MetricsSource {
  RankIdentity who;
  std::shared_ptr<const FlightRecorder> recorder;
  // Bytes sent to and received from each rank (0..who.size-1).
  std::function<void(int peer, std::uint64_t& sent, std::uint64_t& received)> traffic;
};

// Serves `source` until the returned registration is released; its
// release waits for a scrape under way. Null when RDMX_METRICS_PORT is
// unset or 0.
std::shared_ptr<void> serve_metrics(MetricsSource source);

// The exposition text for these sources (what GET /metrics answers).
std::string metrics_text(const std::vector<const MetricsSource*>& sources, std::int64_t now_ms);

}  // namespace rdmx::coll
