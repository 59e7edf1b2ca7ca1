// SPDX-License-Identifier: MIT
// A job's state from its ranks' status records (rank_status.hpp), read
// from outside the job. A straggler is found from when each rank entered
// each collective: the rank that entered last is the one the others waited
// for, which its own time in the collective (short: it found everyone
// there) cannot show.
#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "coll/rank_status.hpp"
#include "rdmx/status.hpp"

namespace rdmx {
namespace {

using nlohmann::json;

// The collectives each rank keeps (RDMX_HISTORY) bound the window anyway.
constexpr std::size_t kStragglerWindow = 8;

using coll::status_field;

double seconds_between(std::int64_t from_ms, std::int64_t to_ms) { return static_cast<double>(to_ms - from_ms) / 1e3; }

json collective_summary(const json& record) {
  return {{"seq", status_field<std::uint64_t>(record, "seq", 0)},
          {"call", status_field<std::string>(record, "call", "?")},
          {"outcome", status_field<std::string>(record, "outcome", "?")},
          {"entered_ms", status_field<std::int64_t>(record, "entered_ms", 0)},
          {"left_ms", status_field<std::int64_t>(record, "left_ms", 0)}};
}

json rank_view(const json& doc, std::int64_t now_ms) {
  const std::int64_t since = status_field<std::int64_t>(doc, "since_ms", 0);
  const bool inside = status_field<bool>(doc, "inside", false);
  json view = {{"rank", status_field<int>(doc, "rank", -1)},
               {"host", status_field<std::string>(doc, "host", "?")},
               {"pid", status_field<long>(doc, "pid", 0)},
               {"device", status_field<std::string>(doc, "device", "")},
               {"state", since == 0 ? "idle" : (inside ? "inside" : "outside")},
               {"seconds", since == 0 ? 0.0 : seconds_between(since, now_ms)},
               {"status_age_s", seconds_between(status_field<std::int64_t>(doc, "updated_ms", now_ms), now_ms)}};
  const auto history = doc.find("history");
  if (history != doc.end() && history->is_array() && !history->empty()) {
    view[inside ? "current" : "last"] = collective_summary(history->back());
  }
  if (const auto where = doc.find("where"); where != doc.end() && where->is_object()) {
    view["where"] = status_field<std::string>(*where, "innermost", "");
    if (view["where"].get<std::string>().empty()) view["where"] = status_field<std::string>(*where, "text", "");
  }
  return view;
}

// When each rank entered each collective it still remembers: seq -> rank -> ms.
std::map<std::uint64_t, std::map<int, std::int64_t>> entries_by_seq(const std::map<int, json>& docs) {
  std::map<std::uint64_t, std::map<int, std::int64_t>> out;
  for (const auto& [rank, doc] : docs) {
    const auto history = doc.find("history");
    if (history == doc.end() || !history->is_array()) continue;
    for (const json& record : *history) {
      const std::int64_t entered = status_field<std::int64_t>(record, "entered_ms", 0);
      if (entered != 0) out[status_field<std::uint64_t>(record, "seq", 0)][rank] = entered;
    }
  }
  return out;
}

// Over the last collectives every published rank entered: who entered
// last, how often, and how long the others waited for it alone (its entry
// minus the one before it).
json straggler_view(const std::map<int, json>& docs, json& ranks) {
  const auto entries = entries_by_seq(docs);
  std::vector<const std::map<int, std::int64_t>*> window;
  for (auto it = entries.rbegin(); it != entries.rend() && window.size() < kStragglerWindow; ++it) {
    if (it->second.size() == docs.size() && docs.size() >= 2) window.push_back(&it->second);
  }
  if (window.empty()) return nullptr;
  std::map<int, int> last_count;
  std::map<int, std::int64_t> held_ms;
  std::map<int, std::int64_t> late_ms;
  for (const auto* entered : window) {
    std::vector<std::pair<std::int64_t, int>> order;
    for (const auto& [rank, ms] : *entered) order.emplace_back(ms, rank);
    std::sort(order.begin(), order.end());
    for (const auto& [ms, rank] : order) late_ms[rank] += ms - order.front().first;
    const auto& [last_ms, last_rank] = order.back();
    const std::int64_t lead = last_ms - order[order.size() - 2].first;
    if (lead > 0) {
      ++last_count[last_rank];
      held_ms[last_rank] += lead;
    }
  }
  for (json& view : ranks) {
    const int rank = view["rank"].get<int>();
    view["late_ms_mean"] = static_cast<double>(late_ms[rank]) / static_cast<double>(window.size());
  }
  const auto slowest = std::max_element(held_ms.begin(), held_ms.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
  if (slowest == held_ms.end()) {
    return {{"rank", nullptr}, {"collectives", window.size()}};
  }
  return {{"rank", slowest->first},
          {"host", status_field<std::string>(docs.at(slowest->first), "host", "?")},
          {"collectives", window.size()},
          {"entered_last", last_count[slowest->first]},
          {"held_ms", slowest->second}};
}

// The newest collective some rank is inside, and who has not called it.
json under_way_view(const std::map<int, json>& docs, int size) {
  std::uint64_t newest = 0;
  std::string call;
  for (const auto& [rank, doc] : docs) {
    if (!status_field<bool>(doc, "inside", false)) continue;
    const json& last = doc["history"].back();
    if (status_field<std::uint64_t>(last, "seq", 0) >= newest) {
      newest = status_field<std::uint64_t>(last, "seq", 0);
      call = status_field<std::string>(last, "call", "?");
    }
  }
  if (call.empty()) return nullptr;
  json in_it = json::array();
  json not_called = json::array();
  json no_news = json::array();
  json unknown = json::array();
  std::int64_t first_entry = 0;
  std::vector<int> behind;  // ranks whose last collective is an earlier one
  for (int rank = 0; rank < size; ++rank) {
    const auto doc = docs.find(rank);
    if (doc == docs.end()) {
      unknown.push_back(rank);
      continue;
    }
    std::uint64_t latest = 0;
    std::int64_t entered = 0;
    for (const json& record : doc->second["history"]) {
      if (status_field<std::uint64_t>(record, "seq", 0) == newest) {
        entered = status_field<std::int64_t>(record, "entered_ms", 0);
      }
      latest = std::max(latest, status_field<std::uint64_t>(record, "seq", 0));
    }
    if (latest >= newest) {
      in_it.push_back(rank);
      if (entered != 0 && (first_entry == 0 || entered < first_entry)) first_entry = entered;
    } else {
      behind.push_back(rank);
    }
  }
  // A record written before the collective began cannot say that its rank
  // has not called it: records are snapshots of different moments.
  for (int rank : behind) {
    const std::int64_t updated = status_field<std::int64_t>(docs.at(rank), "updated_ms", 0);
    (updated >= first_entry ? not_called : no_news).push_back(rank);
  }
  return {{"seq", newest},      {"call", call},       {"in_it", in_it},         {"not_called", not_called},
          {"no_news", no_news}, {"unknown", unknown}, {"since_ms", first_entry}};
}

json communicator_view(const std::string& tag, const std::map<int, json>& docs, std::int64_t now_ms) {
  int size = 0;
  std::map<std::string, int> hosts;
  json ranks = json::array();
  for (const auto& [rank, doc] : docs) {
    size = std::max(size, status_field<int>(doc, "size", 0));
    ++hosts[status_field<std::string>(doc, "host", "?")];
    ranks.push_back(rank_view(doc, now_ms));
  }
  json missing = json::array();
  for (int rank = 0; rank < size; ++rank) {
    if (!docs.contains(rank)) missing.push_back(rank);
  }
  json view = {{"tag", tag}, {"size", size}, {"hosts", hosts.size()}, {"ranks", ranks}, {"unpublished", missing}};
  view["under_way"] = under_way_view(docs, size);
  view["slowest"] = straggler_view(docs, view["ranks"]);
  return view;
}

std::string rank_list(const json& ranks) {
  std::string text;
  for (const json& r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r.get<int>());
  return text;
}

std::string describe_rank(const json& view) {
  char head[160];
  std::snprintf(head, sizeof(head), "  rank %-4d %s pid %ld %s: ", status_field<int>(view, "rank", -1),
                status_field<std::string>(view, "host", "?").c_str(), status_field<long>(view, "pid", 0),
                status_field<std::string>(view, "device", "").c_str());
  std::string text = head;
  const std::string state = status_field<std::string>(view, "state", "");
  const double seconds = status_field<double>(view, "seconds", 0.0);
  if (state == "idle") {
    text += "has entered no collective";
  } else if (state == "inside") {
    text += "inside " + status_field<std::string>(view["current"], "call", "?") + " for " +
            coll::status_seconds_text(seconds);
  } else {
    text += "out of rdmx for " + coll::status_seconds_text(seconds);
    if (view.contains("last")) {
      text += " (last: " + status_field<std::string>(view["last"], "call", "?") + " " +
              status_field<std::string>(view["last"], "outcome", "?") + ")";
    }
  }
  if (view.contains("where") && !view["where"].get<std::string>().empty()) {
    text += ", at " + view["where"].get<std::string>();
  }
  if (view.contains("late_ms_mean") && view["late_ms_mean"].get<double>() >= 1.0) {
    text += "; enters " + coll::status_seconds_text(view["late_ms_mean"].get<double>() / 1e3) +
            " after the first, on average";
  }
  const double age = status_field<double>(view, "status_age_s", 0.0);
  if (age > 3.0)
    text += " [its record is " + coll::status_seconds_text(age) + " old: stopped, or its store connection busy]";
  return text;
}

std::string describe_communicator(const json& comm, std::int64_t now_ms) {
  const json& ranks = comm["ranks"];
  std::string text = "communicator '" + status_field<std::string>(comm, "tag", "?") +
                     "': " + std::to_string(status_field<int>(comm, "size", 0)) + " ranks on " +
                     std::to_string(status_field<int>(comm, "hosts", 0)) + " host(s)";
  if (!comm["unpublished"].empty()) text += "; no record from ranks " + rank_list(comm["unpublished"]);
  text += "\n";
  for (const json& view : ranks) text += describe_rank(view) + "\n";
  if (const json& busy = comm["under_way"]; busy.is_object()) {
    text += "  under way: " + status_field<std::string>(busy, "call", "?");
    if (const std::int64_t since = status_field<std::int64_t>(busy, "since_ms", 0); since != 0) {
      text += " for " + coll::status_seconds_text(seconds_between(since, now_ms));
    }
    text += "; in it: ranks " + rank_list(busy["in_it"]);
    if (!busy["not_called"].empty()) text += "; NOT CALLED by ranks " + rank_list(busy["not_called"]);
    if (!busy["no_news"].empty()) {
      text += "; ranks " + rank_list(busy["no_news"]) + " wrote their records before it began";
    }
    text += "\n";
  }
  if (const json& slow = comm["slowest"]; slow.is_object()) {
    const std::size_t window = status_field<std::size_t>(slow, "collectives", 0);
    if (slow["rank"].is_null()) {
      text += "  slowest rank of the last " + std::to_string(window) + " collectives: none (all entered together)\n";
    } else {
      text += "  slowest rank of the last " + std::to_string(window) + " collectives: rank " +
              std::to_string(slow["rank"].get<int>()) + " (" + status_field<std::string>(slow, "host", "?") +
              "), entered last " + std::to_string(status_field<int>(slow, "entered_last", 0)) +
              " times; the others waited " +
              coll::status_seconds_text(static_cast<double>(status_field<std::int64_t>(slow, "held_ms", 0)) / 1e3) +
              " for it alone\n";
    }
  }
  return text;
}

}  // namespace

std::vector<std::string> read_status_records(Store& store) {
  static const std::regex kStatusKey(R"((^|.*/)status/[0-9]+$)");
  std::vector<std::string> records;
  for (const std::string& key : store.keys("")) {
    if (!std::regex_match(key, kStatusKey)) continue;
    try {
      if (!store.check(key)) continue;
      const Bytes raw = store.get(key, std::chrono::milliseconds(1000));
      json doc = json::parse(raw.begin(), raw.end(), nullptr, false);
      if (doc.is_object()) {
        // Where it was found tells apart communicators of one tag under
        // different prefixes (torch's groups all have the tag "rdmx").
        doc["key"] = key;
        records.push_back(doc.dump());
      } else {
        records.emplace_back(raw.begin(), raw.end());
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;  // removed after it was listed: its communicator is gone
    }
  }
  return records;
}

std::string job_status_json(const std::vector<std::string>& records, std::int64_t now_ms) {
  std::map<std::string, std::map<int, json>> by_tag;
  json unreadable = json::array();
  for (const std::string& text : records) {
    json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("tag") || !doc.contains("rank") ||
        !doc["tag"].is_string() || !doc["rank"].is_number_integer() ||
        (doc.contains("history") && !doc["history"].is_array())) {
      unreadable.push_back(text.substr(0, 200));
      continue;
    }
    if (!doc.contains("history")) doc["history"] = json::array();
    if (doc["history"].empty()) doc["inside"] = false;
    // The communicator: its records' key without "/status/<rank>", else its tag.
    std::string tag = doc["tag"].get<std::string>();
    if (const auto key = doc.find("key"); key != doc.end() && key->is_string()) {
      const std::string& where = key->get_ref<const std::string&>();
      tag = where.substr(0, where.rfind("/status/"));
    }
    const int rank = doc["rank"].get<int>();
    by_tag[tag][rank] = std::move(doc);
  }
  json comms = json::array();
  for (const auto& [tag, docs] : by_tag) comms.push_back(communicator_view(tag, docs, now_ms));
  return json{{"schema", "rdmx.status/1"}, {"now_ms", now_ms}, {"communicators", comms}, {"unreadable", unreadable}}
      .dump();
}

std::string describe_job_status(const std::string& job_status_json) {
  const json doc = json::parse(job_status_json);
  const std::int64_t now = status_field<std::int64_t>(doc, "now_ms", 0);
  std::string text;
  if (doc["communicators"].empty()) {
    text = "no rank status in this store: no communicator is alive, or its ranks run with RDMX_STATUS_INTERVAL=0\n";
  }
  for (const json& comm : doc["communicators"]) text += describe_communicator(comm, now);
  for (const json& bad : doc["unreadable"]) text += "unreadable record: " + bad.get<std::string>() + "\n";
  return text;
}

}  // namespace rdmx
