// SPDX-License-Identifier: MIT
#include "coll/rank_status.hpp"

#include <chrono>
#include <cstdio>

#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

using nlohmann::json;

const char* outcome_word(CollectiveRecord::Outcome o) {
  switch (o) {
    case CollectiveRecord::Outcome::Running: return "running";
    case CollectiveRecord::Outcome::Done: return "done";
    case CollectiveRecord::Outcome::Failed: return "failed";
  }
  return "?";
}

}  // namespace

std::string status_seconds_text(double s) {
  char text[32];
  if (s < 1.0) {
    std::snprintf(text, sizeof(text), "%.1f ms", s * 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.1f s", s);
  }
  return text;
}

std::string rank_status_key(const std::string& tag, int rank) { return tag + "/status/" + std::to_string(rank); }

json rank_status_document(const RankIdentity& who, const FlightRecorder::Snapshot& snap,
                          const core::ProgramLocation* where, std::int64_t now_ms) {
  json history = json::array();
  for (const CollectiveRecord& r : snap.history) {
    history.push_back({{"seq", r.desc.seq},
                       {"call", describe(r.desc)},
                       {"bytes", r.bytes},
                       {"entered_ms", r.entered_ms},
                       {"left_ms", r.left_ms},
                       {"outcome", outcome_word(r.outcome)}});
  }
  json doc = {{"tag", who.tag},       {"rank", who.rank},      {"size", who.size},
              {"host", who.host},     {"pid", who.pid},        {"device", who.device},
              {"updated_ms", now_ms}, {"inside", snap.inside}, {"since_ms", snap.since_ms},
              {"history", history}};
  if (where != nullptr && !where->kind.empty()) {
    doc["where"] = {{"kind", where->kind}, {"innermost", where->innermost}, {"text", where->text}};
  }
  return doc;
}

std::string describe_rank_status(int rank, const json* doc, std::int64_t now_ms) {
  std::string text = "rank " + std::to_string(rank);
  if (doc == nullptr || !doc->is_object()) {
    return text + " published no status (RDMX_STATUS_INTERVAL=0, or it has made no communicator yet)";
  }
  text += " (" + status_field<std::string>(*doc, "host", "?") + ", pid " +
          std::to_string(status_field<long>(*doc, "pid", 0)) + ")";
  const std::int64_t updated = status_field<std::int64_t>(*doc, "updated_ms", 0);
  const std::int64_t since = status_field<std::int64_t>(*doc, "since_ms", 0);
  const bool inside = status_field<bool>(*doc, "inside", false);
  if (since == 0) {
    text += ": has entered no collective";
  } else {
    text += inside ? ": inside its current collective for " : ": out of rdmx for ";
    text += status_seconds_text(static_cast<double>(now_ms - since) / 1e3);
  }
  if (updated != 0 && now_ms - updated > 3000) {
    text += " (its status is " + status_seconds_text(static_cast<double>(now_ms - updated) / 1e3) +
            " old: the process may be stopped or its store connection busy)";
  }
  if (const auto where = doc->find("where"); where != doc->end() && where->is_object()) {
    const std::string kind = status_field<std::string>(*where, "kind", "");
    const std::string innermost = status_field<std::string>(*where, "innermost", "");
    if (kind == "python" && !innermost.empty()) {
      text += ", at " + innermost;
    } else if (kind == "kernel") {
      text += ", " + status_field<std::string>(*where, "text", "");
    }
  }
  const auto history = doc->find("history");
  if (history != doc->end() && history->is_array() && !history->empty()) {
    text += "; last collectives:";
    for (const json& r : *history) {
      const std::int64_t entered = status_field<std::int64_t>(r, "entered_ms", 0);
      const std::int64_t left = status_field<std::int64_t>(r, "left_ms", 0);
      text += " " + status_field<std::string>(r, "call", "?");
      const std::string outcome = status_field<std::string>(r, "outcome", "?");
      if (left != 0) {
        text += " " + outcome +
                (left == entered ? std::string(" in under 1 ms")
                                 : " in " + status_seconds_text(static_cast<double>(left - entered) / 1e3));
      } else {
        text += " " + outcome + " for " + status_seconds_text(static_cast<double>(now_ms - entered) / 1e3);
      }
      text += ",";
    }
    text.pop_back();
  }
  return text;
}

std::string describe_ranks_from_store(Store& store, const std::string& tag, const std::vector<int>& ranks) {
  // The error or warning this text joins must not come much later than it
  // would without it, whatever the store's health: a short bound per read
  // and for all of them.
  constexpr auto kPerRank = std::chrono::milliseconds(50);
  constexpr auto kInAll = std::chrono::milliseconds(300);
  const auto give_up = std::chrono::steady_clock::now() + kInAll;
  const std::int64_t now = unix_ms_now();
  std::string text;
  auto not_read = [&](std::size_t from, const std::string& why) {
    std::string rest;
    for (std::size_t j = from; j < ranks.size(); ++j) rest += " " + std::to_string(ranks[j]);
    text += (text.empty() ? "" : "\n") + ("ranks" + rest + ": their status was not read: " + why);
  };
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (std::chrono::steady_clock::now() >= give_up) {
      not_read(i, "the store took longer than " + std::to_string(kInAll.count()) + " ms to answer the others");
      break;
    }
    json doc;
    bool have = false;
    try {
      const Bytes raw = store.get(rank_status_key(tag, r), kPerRank);
      doc = json::parse(raw.begin(), raw.end());
      have = true;
    } catch (const Error& e) {
      // Absent (the server said so within the bound) is "published none";
      // a server that did not answer is asked nothing more.
      if (e.code() != ErrorCode::Timeout || std::string(e.what()).find("did not answer") != std::string::npos) {
        not_read(i, e.what());
        break;
      }
    } catch (const std::exception& e) {
      not_read(i, e.what());
      break;
    }
    text += (text.empty() ? "" : "\n") + describe_rank_status(r, have ? &doc : nullptr, now);
  }
  return text;
}

}  // namespace rdmx::coll
