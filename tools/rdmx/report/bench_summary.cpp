// SPDX-License-Identifier: MIT
#include "report/bench_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>

#include "report/report_html.hpp"

namespace rdmx::cli {

std::string human_bytes(std::uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

namespace {

using nlohmann::json;

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// `text` in lines of at most `width` columns, each ending in a newline.
std::string wrap(const std::string& text, std::size_t width) {
  std::string out, line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return line.empty() ? out : out + line + "\n";
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text;
}

// The figure a row is judged by: typical latency, or average bandwidth.
const char* figure_key(const json& row) { return row.contains("t_typical_us") ? "t_typical_us" : "bw_avg_gb_s"; }

double spread_of(const json& row) { return row.contains("spread") ? row["spread"].get<double>() : 1.0; }

// "6.52 us (2 B)", with the mark when its rounds spread widely.
std::string cell(const json& value, const std::string& unit, const json& bytes, const json& spread) {
  if (value.is_null()) return "n/a";
  std::string text = fixed(value.get<double>(), 2) + " " + unit + " (" + human_bytes(bytes.get<std::uint64_t>()) + ")";
  if (spread.is_number() && spread.get<double>() > kSpreadMark) text += " !";
  return text;
}

std::uint64_t parse_cache_size(const std::string& text) {
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = text.substr(used, 1);
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  return value;
}

}  // namespace

std::uint64_t last_level_cache_bytes(std::uint64_t fallback) {
  int best_level = 0;
  std::uint64_t best = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || level < best_level) continue;
    best_level = level;
    best = parse_cache_size(size);
  }
  return best != 0 ? best : fallback;
}

std::uint64_t out_of_cache_bytes(std::uint64_t llc_bytes) {
  std::uint64_t size = 1u << 20;
  while (size < 2 * llc_bytes && size < (std::uint64_t{1} << 30)) size <<= 1;
  return size;
}

json merge_rounds(const json& p2p) {
  // (provider, test) in first-seen order; per size, every round's row.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::map<std::uint64_t, std::vector<json>>> rows;
  for (const auto& run : p2p) {
    const auto key = std::make_pair(run["provider"].get<std::string>(), run["test"].get<std::string>());
    if (!rows.contains(key)) order.push_back(key);
    auto& sizes = rows[key];
    for (const auto& row : run["results"]) sizes[row["bytes"].get<std::uint64_t>()].push_back(row);
  }
  json merged = json::array();
  for (const auto& key : order) {
    json results = json::array();
    for (auto& [bytes, rounds] : rows[key]) {
      const char* figure = figure_key(rounds.front());
      std::sort(rounds.begin(), rounds.end(),
                [figure](const json& a, const json& b) { return a[figure].get<double>() < b[figure].get<double>(); });
      json row = rounds[(rounds.size() - 1) / 2];
      const double low = rounds.front()[figure].get<double>();
      const double high = rounds.back()[figure].get<double>();
      row["rounds"] = rounds.size();
      row["spread"] = low > 0 ? high / low : 1.0;
      results.push_back(std::move(row));
    }
    merged.push_back({{"provider", key.first}, {"test", key.second}, {"results", std::move(results)}});
  }
  return merged;
}

json summarize(const json& doc, const std::vector<std::string>& providers) {
  // Bandwidth "best" counts sizes from 1 MiB on (when the sweep has any):
  // below that a READ or WRITE of the same buffer over and over runs from
  // the CPU caches on shared memory, which says nothing about a fabric.
  constexpr std::uint64_t kMinBandwidthBytes = 1u << 20;
  std::uint64_t largest = 0;
  for (const auto& run : doc["p2p"]) {
    for (const auto& row : run["results"]) {
      if (row.contains("bw_avg_gb_s")) largest = std::max(largest, row["bytes"].get<std::uint64_t>());
    }
  }
  const std::uint64_t min_bw_bytes = std::min(largest, kMinBandwidthBytes);
  const std::uint64_t llc = doc["host"].value("llc_bytes", std::uint64_t{0});
  json summary = json::array();
  for (const auto& p : providers) {
    json entry = {{"provider", p},
                  {"write_latency_us", nullptr},
                  {"write_latency_bytes", nullptr},
                  {"write_latency_spread", nullptr},
                  {"bw_out_of_cache_gb_s", nullptr},
                  {"bw_out_of_cache_test", nullptr},
                  {"bw_out_of_cache_bytes", nullptr},
                  {"bw_out_of_cache_spread", nullptr},
                  {"best_latency_us", nullptr},
                  {"best_latency_test", ""},
                  {"best_latency_bytes", 0},
                  {"best_bw_gb_s", nullptr},
                  {"best_bw_test", ""},
                  {"best_bw_bytes", 0},
                  {"allreduce_busbw_GBps", json::array()}};
    for (const auto& run : doc["p2p"]) {
      if (run["provider"] != p) continue;
      for (const auto& row : run["results"]) {
        const std::uint64_t bytes = row["bytes"];
        if (row.contains("t_typical_us")) {
          const double t = row["t_typical_us"];
          if (entry["best_latency_us"].is_null() || t < entry["best_latency_us"].get<double>()) {
            entry["best_latency_us"] = t;
            entry["best_latency_test"] = run["test"];
            entry["best_latency_bytes"] = bytes;
          }
          // The smallest WRITE: what a program waits for a message to land.
          if (run["test"] == "write_lat" &&
              (entry["write_latency_bytes"].is_null() || bytes < entry["write_latency_bytes"].get<std::uint64_t>())) {
            entry["write_latency_us"] = t;
            entry["write_latency_bytes"] = bytes;
            entry["write_latency_spread"] = spread_of(row);
          }
        } else if (row.contains("bw_avg_gb_s")) {
          const double bw = row["bw_avg_gb_s"];
          if (bytes >= min_bw_bytes && (entry["best_bw_gb_s"].is_null() || bw > entry["best_bw_gb_s"].get<double>())) {
            entry["best_bw_gb_s"] = bw;
            entry["best_bw_test"] = run["test"];
            entry["best_bw_bytes"] = bytes;
          }
          // The largest WRITE beyond the last-level cache: a memory (or
          // network) rate, not a cache's.
          if (run["test"] == "write_bw" && llc != 0 && bytes > llc &&
              (entry["bw_out_of_cache_bytes"].is_null() ||
               bytes > entry["bw_out_of_cache_bytes"].get<std::uint64_t>())) {
            entry["bw_out_of_cache_gb_s"] = bw;
            entry["bw_out_of_cache_test"] = run["test"];
            entry["bw_out_of_cache_bytes"] = bytes;
            entry["bw_out_of_cache_spread"] = spread_of(row);
          }
        }
      }
    }
    for (const auto& run : doc["coll"]) {
      if (run["provider"] != p || run["collective"] != "all_reduce") continue;
      for (const auto& row : run["results"]) {
        if (row["inplace"] == false) {
          entry["allreduce_busbw_GBps"].push_back({{"bytes", row["bytes"]}, {"busbw_GBps", row["busbw_GBps"]}});
        }
      }
    }
    summary.push_back(std::move(entry));
  }
  return summary;
}

std::string format_summary(const json& doc) {
  std::string out;
  const auto print = [&out](const char* format, auto... values) {
    char line[512];
    std::snprintf(line, sizeof line, format, values...);
    out += line;
  };
  // A handful of all_reduce sizes; every size is in the JSON and the report.
  const std::vector<std::uint64_t> shown = {8, 4096, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
  std::vector<std::uint64_t> columns;
  for (std::uint64_t size : shown) {
    for (const auto& s : doc["summary"]) {
      bool has = false;
      for (const auto& c : s["allreduce_busbw_GBps"]) has = has || c["bytes"] == size;
      if (has) {
        columns.push_back(size);
        break;
      }
    }
  }
  const std::uint64_t llc = doc["host"].value("llc_bytes", std::uint64_t{0});
  const std::string bw_title = "write bandwidth > LLC " + (llc != 0 ? "(" + human_bytes(llc) + ")" : std::string());
  print("\n== rdmx bench: %d local ranks for all_reduce, 2 for p2p; %s\n", doc["ranks"].get<int>(),
        doc["host"]["hostname"].get<std::string>().c_str());
  print("%-8s  %-24s  %-30s  all_reduce busbw GB/s (out of place)\n", "provider", "write latency (typical)",
        bw_title.c_str());
  print("%-8s  %-24s  %-30s ", "", "", "");
  for (std::uint64_t size : columns) print(" %9s", human_bytes(size).c_str());
  out += "\n";
  bool marked = false;
  for (const auto& s : doc["summary"]) {
    const std::string latency = cell(s.value("write_latency_us", json()), "us", s.value("write_latency_bytes", json()),
                                     s.value("write_latency_spread", json()));
    const std::string bandwidth =
        cell(s.value("bw_out_of_cache_gb_s", json()), "GB/s", s.value("bw_out_of_cache_bytes", json()),
             s.value("bw_out_of_cache_spread", json()));
    marked = marked || latency.ends_with(" !") || bandwidth.ends_with(" !");
    print("%-8s  %-24s  %-30s ", s["provider"].get<std::string>().c_str(), latency.c_str(), bandwidth.c_str());
    for (std::uint64_t size : columns) {
      std::string busbw = "-";
      for (const auto& c : s["allreduce_busbw_GBps"]) {
        if (c["bytes"] == size) busbw = fixed(c["busbw_GBps"], 3);
      }
      print(" %9s", busbw.c_str());
    }
    out += "\n";
  }
  for (const auto& p : doc["providers"]) {
    if (!p["usable"].get<bool>()) {
      out += pad(p["name"].get<std::string>(), 8) + "  not usable: " + p["reason"].get<std::string>() + "\n";
    }
  }
  for (const auto& e : doc["errors"]) {
    out += "FAILED    " + e["what"].get<std::string>() + ": " + e["message"].get<std::string>() + "\n";
  }
  if (marked) {
    print(
        "! its rounds differ by more than %.1fx (largest over smallest): the host was busy; rerun before quoting it.\n",
        kSpreadMark);
  }
  out +=
      "GB = 1e9 bytes; write latency is half a round trip (perftest); results.json and the report have every test "
      "and size.\n";
  return out + wrap(kSameHostCaveat, 100);
}

}  // namespace rdmx::cli
