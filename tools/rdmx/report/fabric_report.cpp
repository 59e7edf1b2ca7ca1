// SPDX-License-Identifier: MIT
#include "report/fabric_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace rdmx::cli::fabric {
namespace {

using nlohmann::json;

// The value below which a fraction `q` of `values` lies (linear between
// neighbours, as numpy's default).
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(at);
  const std::size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (at - static_cast<double>(low));
}

double median(const std::vector<double>& values) { return quantile(values, 0.5); }

// A link is judged against the upper quartile of its pattern: the median
// would call the healthy links fast when most links cross one bad NIC.
constexpr double kReferenceQuantile = 0.75;

std::string fixed(double value, int decimals) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string rank_text(int rank, const std::string& host, const std::string& interface) {
  return "rank " + std::to_string(rank) + " (" + host + (interface.empty() ? "" : " " + interface) + ")";
}

// A rank every measured link through which is slow is the likely culprit:
// its NIC, cable or switch port, rather than the links' other ends. Only
// when links that avoid it exist to compare with, and only from links
// within one network: a link across networks rides the NICs the routes pick.
json suspects(const std::vector<Link>& all_links, double reference, double threshold) {
  std::vector<Link> links;
  for (const Link& l : all_links) {
    if (!l.across_networks) links.push_back(l);
  }
  std::map<int, std::vector<double>> through;
  std::map<int, std::set<int>> partners;
  std::map<int, std::pair<std::string, std::string>> where;  // host, interface
  for (const Link& l : links) {
    partners[l.from].insert(l.to);
    partners[l.to].insert(l.from);
    through[l.from].push_back(l.gbps);
    through[l.to].push_back(l.gbps);
    where[l.from] = {l.from_host, l.interface};
    where[l.to] = {l.to_host, l.to_interface};
  }
  json out = json::array();
  if (through.size() < 3) return out;  // two ranks: nothing to tell their ends apart
  for (const auto& [rank, rates] : through) {
    const double others_median = [&] {
      std::vector<double> others;
      for (const Link& l : links) {
        if (l.from != rank && l.to != rank) others.push_back(l.gbps);
      }
      return others.empty() ? reference : median(others);
    }();
    const double best = *std::max_element(rates.begin(), rates.end());
    if (best < threshold * others_median) {
      out.push_back({{"rank", rank},
                     {"host", where[rank].first},
                     {"interface", where[rank].second},
                     {"best_GBps", best},
                     {"others_GBps", others_median},
                     {"why", "every link through it is at most " + fixed(best / others_median, 2) +
                                 "x the median of the links that avoid it"}});
    }
  }
  // Suspects whose every link joins them to other suspects (the two ends of
  // the one slow cable of a rail, say): nothing measured tells them apart.
  std::set<int> named;
  for (const json& s : out) named.insert(s["rank"].get<int>());
  for (json& s : out) {
    std::string others;
    bool only_suspects = true;
    for (int p : partners[s["rank"].get<int>()]) {
      only_suspects = only_suspects && named.count(p) > 0;
      others += (others.empty() ? "rank " : ", ") + std::to_string(p);
    }
    if (only_suspects) {
      s["why"] = s["why"].get<std::string>() + "; its links within its network all end at " + others +
                 ", also named: either end";
    }
  }
  return out;
}

}  // namespace

json analyse(const Analysis& input) {
  std::map<std::string, std::vector<double>> by_pattern;
  for (const Link& l : input.links) by_pattern[l.pattern].push_back(l.gbps);
  json references = json::object();
  for (const auto& [pattern, rates] : by_pattern) references[pattern] = quantile(rates, kReferenceQuantile);
  json links = json::array();
  json outliers = json::array();
  for (const Link& l : input.links) {
    const double reference = references[l.pattern].get<double>();
    const double ratio = reference > 0 ? l.gbps / reference : 1.0;
    const bool outlier = by_pattern[l.pattern].size() >= 2 && ratio < input.threshold;
    json link = {{"pattern", l.pattern},
                 {"from", l.from},
                 {"to", l.to},
                 {"from_host", l.from_host},
                 {"to_host", l.to_host},
                 {"device", l.device},
                 {"interface", l.interface},
                 {"to_interface", l.to_interface},
                 {"GBps", l.gbps},
                 {"of_reference", ratio},
                 {"outlier", outlier},
                 {"across_networks", l.across_networks}};
    if (l.line_gbps > 0) link["of_line_rate"] = l.gbps / l.line_gbps;
    if (l.line_gbps > 0) link["line_GBps"] = l.line_gbps;
    links.push_back(link);
    if (outlier) {
      outliers.push_back(l.pattern + ": " + rank_text(l.from, l.from_host, l.interface) + " -> " +
                         rank_text(l.to, l.to_host, l.to_interface) + " at " + fixed(l.gbps, 3) + " GB/s, " +
                         fixed(ratio, 2) + "x the reference " + fixed(reference, 3) + " GB/s");
    }
  }
  std::vector<Link> pairs;
  for (const Link& l : input.links) {
    if (l.pattern == "pairs") pairs.push_back(l);
  }
  json counters = json::array();
  for (const CounterChange& c : input.counters) {
    counters.push_back(
        {{"rank", c.rank}, {"host", c.host}, {"interface", c.interface}, {"name", c.name}, {"delta", c.delta}});
  }
  return {{"threshold", input.threshold},
          {"reference_GBps", references},
          {"links", links},
          {"outliers", outliers},
          {"suspects", suspects(pairs, references.value("pairs", 0.0), input.threshold)},
          {"counters", counters}};
}

std::string describe(const json& doc) {
  std::string text;
  for (const char* pattern : {"pairs", "ring"}) {
    bool header = false;
    for (const json& l : doc["links"]) {
      if (l["pattern"] != pattern) continue;
      if (!header) {
        text += std::string("# ") +
                (std::string(pattern) == "pairs" ? "each pair of ranks on different hosts alone, each direction"
                                                 : "ring: every rank sends to the next at once") +
                "; reference (upper quartile) " + fixed(doc["reference_GBps"].value(pattern, 0.0), 3) + " GB/s\n";
        char head[160];
        std::snprintf(head, sizeof(head), "# %5s %5s  %-28s %-28s %8s %8s %7s\n", "from", "to", "from host (nic)",
                      "to host (nic)", "GB/s", "x ref", "x line");
        text += head;
        header = true;
      }
      auto where = [&](const char* host, const char* nic) {
        const std::string name = l[nic].get<std::string>();
        return l[host].get<std::string>() + (name.empty() ? "" : " (" + name + ")");
      };
      char row[256];
      std::snprintf(row, sizeof(row), "  %5d %5d  %-28s %-28s %8.3f %8.2f %7s%s\n", l["from"].get<int>(),
                    l["to"].get<int>(), where("from_host", "interface").c_str(),
                    where("to_host", "to_interface").c_str(), l["GBps"].get<double>(), l["of_reference"].get<double>(),
                    l.contains("of_line_rate") ? fixed(l["of_line_rate"].get<double>(), 2).c_str() : "n/a",
                    l["outlier"].get<bool>() ? "  SLOW" : "");
      text += row;
      if (l["across_networks"].get<bool>()) text.insert(text.size() - 1, "  (across networks)");
    }
  }
  if (std::any_of(doc["links"].begin(), doc["links"].end(),
                  [](const json& l) { return l["across_networks"] == true; })) {
    text +=
        "links across networks ride the NICs the hosts' routes pick, not their ranks' own; suspects come from links "
        "within one network only\n";
  }
  if (doc["links"].empty()) text += "no link between hosts: every rank is on one host (start ranks on several)\n";
  for (const json& o : doc["outliers"]) text += "slow link: " + o.get<std::string>() + "\n";
  for (const json& s : doc["suspects"]) {
    text += "suspect: " + rank_text(s["rank"], s["host"], s["interface"]) + ": " + s["why"].get<std::string>() +
            " (check its NIC, cable and switch port)\n";
  }
  for (const json& c : doc["counters"]) {
    text += "counter: " + rank_text(c["rank"], c["host"], c["interface"]) + " " + c["name"].get<std::string>() + " +" +
            std::to_string(c["delta"].get<long long>()) + " during the sweep\n";
  }
  if (!doc["links"].empty() && doc["outliers"].empty()) {
    text += "no link below " + fixed(doc["threshold"].get<double>(), 2) + "x its pattern's reference\n";
  }
  return text;
}

}  // namespace rdmx::cli::fabric
