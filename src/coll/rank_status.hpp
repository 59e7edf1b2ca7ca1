// SPDX-License-Identifier: MIT
// What each rank of a communicator says of itself in the job's store, under
// "<tag>/status/<rank>": its host and process, its last collectives (the
// flight recorder), since when it is inside its current collective or out
// of rdmx, and, once that has lasted, where its program is. The status
// publisher writes it; stall reports and timeouts read it
// (docs/OBSERVING.md lists its fields).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coll/flight_recorder.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/program_location.hpp"

namespace rdmx::coll {

std::string rank_status_key(const std::string& tag, int rank);

// "150.3 ms" under a second, "5.9 s" from one on: how status texts give
// durations.
std::string status_seconds_text(double seconds);

// A field of a status document, or `fallback` when it is absent or of
// another type: records come from other processes and may be of another
// version.
template <typename T>
T status_field(const nlohmann::json& doc, const char* name, T fallback) {
  const auto it = doc.find(name);
  if (it == doc.end()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

struct RankIdentity {
  std::string tag;  // the communicator's
  int rank = 0;
  int size = 0;
  std::string host;
  long pid = 0;
  std::string device;  // the provider's device
};

nlohmann::json rank_status_document(const RankIdentity& who, const FlightRecorder::Snapshot& snap,
                                    const core::ProgramLocation* where, std::int64_t now_ms);

// One paragraph for a stall report or a timeout: "rank 1 (host a, pid 7):
// out of rdmx for 5.2 s, at train.py:33 in load_batch; last collectives:
// all_reduce #41 (...) 2.1 ms, ...". `doc` null: "rank 1 published no
// status (RDMX_STATUS_INTERVAL=0, or it has not started)".
std::string describe_rank_status(int rank, const nlohmann::json* doc, std::int64_t now_ms);

// The published status of each of `ranks`, read from `store` without
// waiting (a rank that published nothing is said to have nothing).
std::string describe_ranks_from_store(Store& store, const std::string& tag, const std::vector<int>& ranks);

}  // namespace rdmx::coll
