// SPDX-License-Identifier: MIT
#include "report/report_html.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "report/bench_summary.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli {

const char* const kSameHostCaveat =
    "All ranks are on this host: tcp runs over loopback, and same-host bandwidth is a CPU copy rate (faster while "
    "a message fits in the caches). Across hosts the network sets the pace.";

namespace {

// Why shm's read_lat, a full round trip, can sit below write_lat, half of
// one (src/providers/shm/shm_qp.cpp, try_direct_locked: both copy directly
// into or out of the peer's mapped region and complete at once; only the
// ping-pong waits for the other process).
constexpr const char* kShmReadBelowWrite =
    "Why shm's read_lat can sit below its write_lat: an shm READ from memory the target made with allocate_memory "
    "is one copy that the reader makes itself, out of the target's memory mapped into its own address space, and "
    "its completion is known the moment the copy ends, with no message to or from the target. write_lat is half "
    "a ping-pong, so each WRITE counts only once the other process has seen its bytes land and written back: it "
    "includes the cache-line transfers between the cores and the peer's polling.";

using nlohmann::json;

constexpr const char* kMicro = "\xc2\xb5s";  // µs, the page is UTF-8
constexpr const char* kSizeTitle = "Message size (bytes, log2 scale)";
constexpr int kFullWidth = 1100;
constexpr int kHalfWidth = 544;  // two plots side by side in the 1140 px page

// Field access that never throws: a bench that failed half-way may leave
// fields out, and its report matters most then.
const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

const json& list(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& f = field(j, key);
  return f.is_array() ? f : kEmpty;
}

std::string text(const json& j, const char* key) {
  const json& f = field(j, key);
  if (f.is_string()) return f.get<std::string>();
  if (f.is_number() || f.is_boolean()) return f.dump();
  return {};
}

std::optional<double> number(const json& j, const char* key) {
  const json& f = field(j, key);
  if (f.is_number()) return f.get<double>();
  return std::nullopt;
}

bool flag(const json& j, const char* key) {
  const json& f = field(j, key);
  return f.is_boolean() && f.get<bool>();
}

std::string esc(const json& j, const char* key) { return html_escape(text(j, key)); }

std::string plural(const std::optional<double>& n, const char* one, const char* many) {
  if (!n) return std::string("? ") + many;
  return format_number(*n, 6) + " " + (*n == 1 ? one : many);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string note(const std::string& html) { return "<p class=\"note\">" + html + "</p>\n"; }

std::string comma_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + ("<b>" + html_escape(n) + "</b>");
  return out;
}

// ---------------------------------------------------------------------------
// Page frame

const char* const kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;color:#222;background:#fff;max-width:1140px;
  margin:0 auto;padding:0 16px 40px;font-size:15px;line-height:1.45}
h1{font-size:26px;margin:22px 0 6px}
h2{font-size:20px;margin:30px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:17px;margin:20px 0 4px}
.meta{color:#444;margin:2px 0}
table{border-collapse:collapse;margin:6px 0 12px}
th,td{border:1px solid #d6d6d6;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f1f3f5}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.yes{color:#17692e;font-weight:bold}
.no{color:#b3261e;font-weight:bold}
.dim{color:#666;font-size:13px}
.note{background:#fff8e1;border-left:4px solid #e0a800;padding:6px 10px;margin:8px 0}
.plot svg{max-width:100%;height:auto;display:block;margin:8px 0}
.pair{display:flex;gap:12px;flex-wrap:wrap}
details{margin:2px 0 14px}
summary{cursor:pointer;color:#1f4e9c}
footer{margin-top:36px;color:#666;font-size:13px}
)";

std::string page_head(const json& bench) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         "<title>rdmx bench report: " +
         esc(field(bench, "host"), "hostname") + " " + esc(bench, "started") + "</title>\n<style>" + kStyle +
         "</style>\n</head>\n<body>\n";
}

std::string header_section(const json& bench) {
  const json& host = field(bench, "host");
  const bool quick = flag(bench, "quick");
  const auto duration = number(bench, "duration_s");
  std::string out = "<h1>rdmx bench report</h1>\n<p class=\"meta\">Host <b>" + esc(host, "hostname") +
                    "</b> &middot; " + plural(number(host, "cores"), "core", "cores") + ", " +
                    plural(number(host, "logical_cpus"), "logical CPU", "logical CPUs") + ", " +
                    plural(number(host, "numa_nodes"), "NUMA node", "NUMA nodes") + " &middot; started " +
                    esc(bench, "started") + " (UTC) &middot; took " +
                    (duration ? format_number(*duration, 4) : std::string("?")) + " s</p>\n";
  out += "<p class=\"meta\">" + plural(number(bench, "ranks"), "rank", "ranks") + " for collectives &middot; " +
         (quick ? "quick run (--quick: fewer sizes)" : "full size sweep") + " &middot; rdmx " +
         esc(bench, "rdmx_version") + "</p>\n";
  out += std::string("<p class=\"meta dim\">Latency in ") + kMicro +
         "; bandwidth in GB/s (1 GB = 10<sup>9</sup> bytes); sizes in binary units (1 KiB = 1024 bytes). "
         "Hover over a point for its value; each plot has its numbers in a table below it.</p>\n";
  return out;
}

// ---------------------------------------------------------------------------
// Tables

std::string providers_section(const json& bench) {
  std::string out = "<h2>Providers</h2>\n";
  const json& providers = list(bench, "providers");
  if (providers.empty()) return out + note("The results file lists no providers.");
  out += "<table>\n<tr><th>Provider</th><th>Usable</th><th>Device</th><th>Reason</th></tr>\n";
  for (const auto& p : providers) {
    const bool usable = flag(p, "usable");
    out += "<tr><td><b>" + esc(p, "name") + "</b></td><td class=\"" + (usable ? "yes\">yes" : "no\">no") + "</td><td>" +
           esc(p, "device") + "</td><td>" + esc(p, "reason") + "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string best_cell(const json& s, const char* value_key, const char* unit, const char* test_key,
                      const char* bytes_key) {
  const auto value = number(s, value_key);
  if (!value) return "<td class=\"dim\">no results</td>";
  std::string detail = esc(s, test_key);
  if (const auto bytes = number(s, bytes_key)) detail += ", " + format_bytes(*bytes);
  return "<td class=\"num\">" + format_number(*value) + " " + unit + "<br><span class=\"dim\">" + detail +
         "</span></td>";
}

// A summary figure measured in rounds: its value and size, marked when the
// rounds spread by more than kSpreadMark (bench_summary.hpp).
std::string rounds_cell(const json& s, const char* value_key, const char* unit, const char* bytes_key,
                        const char* spread_key) {
  const auto value = number(s, value_key);
  if (!value) return "<td class=\"dim\">no results</td>";
  std::string detail;
  if (const auto bytes = number(s, bytes_key)) detail = format_bytes(*bytes);
  const auto spread = number(s, spread_key);
  if (spread && *spread > kSpreadMark) {
    detail += " <b title=\"the rounds differ by more than " + format_number(kSpreadMark) + "x\">! rounds spread " +
              format_number(*spread) + "x</b>";
  }
  return "<td class=\"num\">" + format_number(*value) + " " + unit + "<br><span class=\"dim\">" + detail +
         "</span></td>";
}

std::string summary_section(const json& bench) {
  std::string out = "<h2>Summary</h2>\n" + note(html_escape(kSameHostCaveat));
  const json& summary = list(bench, "summary");
  if (summary.empty()) return out + note("No provider produced results, so there is no summary.");
  std::set<double> sizes;
  for (const auto& s : summary) {
    for (const auto& r : list(s, "allreduce_busbw_GBps")) {
      if (const auto b = number(r, "bytes")) sizes.insert(*b);
    }
  }
  out +=
      "<table>\n<tr><th rowspan=\"2\">Provider</th><th rowspan=\"2\">Write latency</th>"
      "<th rowspan=\"2\">Write bandwidth beyond the last-level cache</th><th rowspan=\"2\">Best latency (any "
      "test)</th><th rowspan=\"2\">Best bandwidth (any test)</th>";
  out += sizes.empty() ? std::string("<th rowspan=\"2\">all_reduce bus bandwidth</th></tr>\n<tr>")
                       : "<th colspan=\"" + std::to_string(sizes.size()) +
                             "\">all_reduce bus bandwidth (GB/s) at</th></tr>\n<tr>";
  for (const double b : sizes) out += "<th>" + format_bytes(b) + "</th>";
  out += "</tr>\n";
  for (const auto& s : summary) {
    out += "<tr><td><b>" + esc(s, "provider") + "</b></td>" +
           rounds_cell(s, "write_latency_us", kMicro, "write_latency_bytes", "write_latency_spread") +
           rounds_cell(s, "bw_out_of_cache_gb_s", "GB/s", "bw_out_of_cache_bytes", "bw_out_of_cache_spread") +
           best_cell(s, "best_latency_us", kMicro, "best_latency_test", "best_latency_bytes") +
           best_cell(s, "best_bw_gb_s", "GB/s", "best_bw_test", "best_bw_bytes");
    std::map<double, double> busbw;
    for (const auto& r : list(s, "allreduce_busbw_GBps")) {
      const auto b = number(r, "bytes");
      const auto v = number(r, "busbw_GBps");
      if (b && v) busbw[*b] = *v;
    }
    if (sizes.empty()) out += "<td class=\"dim\">no results</td>";
    for (const double b : sizes) {
      const auto it = busbw.find(b);
      out += it == busbw.end() ? std::string("<td class=\"dim\">&ndash;</td>")
                               : "<td class=\"num\">" + format_number(it->second) + "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// The numbers behind a plot, for reading exact values and for copying.
std::string series_table(const std::vector<PlotSeries>& series, const std::string& what) {
  std::set<double> sizes;
  for (const auto& s : series) {
    for (const auto& p : s.points) sizes.insert(p.x);
  }
  std::string out = "<details><summary>" + html_escape(what) + ": table</summary>\n<table>\n<tr><th>Size</th>";
  for (const auto& s : series) out += "<th>" + html_escape(s.label) + "</th>";
  out += "</tr>\n";
  for (const double x : sizes) {
    out += "<tr><td class=\"num\">" + format_bytes(x) + "</td>";
    for (const auto& s : series) {
      const auto it = std::find_if(s.points.begin(), s.points.end(), [x](const PlotPoint& p) { return p.x == x; });
      out += it == s.points.end() ? std::string("<td></td>") : "<td class=\"num\">" + format_number(it->y, 4) + "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table></details>\n";
}

// A plot with its table, or a note when there is nothing to draw.
std::string plot_block(const PlotSpec& spec, const std::vector<PlotSeries>& series, const std::string& what) {
  const std::string svg = render_svg_plot(spec, series);
  if (svg.empty()) return note("No " + html_escape(what) + " results to plot.");
  return "<div class=\"plot\">" + svg + "</div>\n" + series_table(series, spec.title + " (" + spec.y_unit + ")");
}

// ---------------------------------------------------------------------------
// Styles: one colour per provider and one line style (dash pattern and
// marker) per test, the same in every plot, so a line reads the same wherever
// it appears.

// A provider's colour is its place among every provider the document names.
int provider_index(const json& bench, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : list(bench, "providers")) names.push_back(text(p, "name"));
  for (const char* section : {"p2p", "coll"}) {
    for (const auto& entry : list(bench, section)) {
      const std::string provider = text(entry, "provider");
      if (std::find(names.begin(), names.end(), provider) == names.end()) names.push_back(provider);
    }
  }
  return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
}

struct LineStyle {
  const char* dash;  // SVG stroke-dasharray; "" solid
  int marker;        // svg_plot's marker shapes: 0 circle, 1 square, 2 triangle, 3 diamond, 4 triangle down
  bool hollow;
};

// Per operation: write_lat and write_bw never share a plot, and a write reads
// as a write in both. Collectives: a plot per collective, out of place solid,
// in place dashed with open markers (the two often coincide; both must show).
struct TestStyle {
  const char* operation;  // the test name up to its "_"
  const char* words;      // for the key above the plots
  LineStyle style;
};
constexpr TestStyle kTestStyles[] = {
    {"write", "write: solid line, circles", {"", 0, false}},
    {"read", "read: dashed, squares", {"9 4", 1, false}},
    {"send", "send: dotted, triangles", {"2 3", 2, false}},
    {"atomic", "atomic: dash-dot, diamonds", {"12 3 2 3", 3, false}},
};
constexpr LineStyle kOtherTestStyle{"1 4", 4, false};  // a test this page does not know
constexpr LineStyle kOutOfPlaceStyle{"", 0, false};
constexpr LineStyle kInPlaceStyle{"9 4", 1, true};

LineStyle p2p_style(const std::string& test) {
  const std::string operation = test.substr(0, test.find('_'));
  for (const auto& t : kTestStyles) {
    if (operation == t.operation) return t.style;
  }
  return kOtherTestStyle;
}

void apply(PlotSeries& s, const json& bench, const std::string& provider, const LineStyle& style) {
  s.colour = provider_index(bench, provider);
  s.dash = style.dash;
  s.marker = style.marker;
  s.hollow = style.hollow;
}

std::string style_key() {
  std::string out = "One colour per provider in every plot; one line style per test: ";
  for (std::size_t i = 0; i < std::size(kTestStyles); ++i)
    out += (i == 0 ? "" : "; ") + std::string(kTestStyles[i].words);
  return out + ".";
}

// ---------------------------------------------------------------------------
// Point-to-point

std::vector<std::string> usable_providers(const json& bench) {
  std::vector<std::string> names;
  for (const auto& p : list(bench, "providers")) {
    if (flag(p, "usable")) names.push_back(text(p, "name"));
  }
  return names;
}

// Usable providers that have no point among `series` (labels start with the
// provider's name), so the page says why a line is missing.
std::vector<std::string> missing_providers(const json& bench, const std::vector<std::string>& with_points) {
  std::vector<std::string> missing;
  for (const auto& name : usable_providers(bench)) {
    if (std::find(with_points.begin(), with_points.end(), name) == with_points.end()) missing.push_back(name);
  }
  return missing;
}

std::optional<double> bw_gb_s(const json& row) {
  if (const auto gb = number(row, "bw_avg_gb_s")) return gb;
  if (const auto mib = number(row, "bw_avg_mib_s")) return *mib * 1048576.0 / 1e9;
  return std::nullopt;
}

struct P2pSeries {
  std::vector<PlotSeries> series;
  std::vector<std::string> providers_with_points;
};

P2pSeries p2p_series(const json& bench, const std::string& suffix) {
  P2pSeries out;
  for (const auto& entry : list(bench, "p2p")) {
    const std::string test = text(entry, "test");
    if (!ends_with(test, suffix)) continue;
    PlotSeries s;
    s.label = text(entry, "provider") + " " + test;
    apply(s, bench, text(entry, "provider"), p2p_style(test));
    for (const auto& row : list(entry, "results")) {
      const auto bytes = number(row, "bytes");
      const auto y = suffix == "_lat" ? number(row, "t_typical_us") : bw_gb_s(row);
      if (bytes && y) s.points.push_back({*bytes, *y});
    }
    if (!s.points.empty()) out.providers_with_points.push_back(text(entry, "provider"));
    out.series.push_back(std::move(s));
  }
  return out;
}

std::string p2p_plot(const json& bench, const std::string& suffix, const PlotSpec& spec, const std::string& what) {
  const P2pSeries data = p2p_series(bench, suffix);
  const auto missing = missing_providers(bench, data.providers_with_points);
  const std::string missing_note =
      missing.empty() ? std::string()
                      : note("No " + html_escape(what) + " results for " + comma_list(missing) + " (see Errors).");
  if (data.providers_with_points.empty() && !missing.empty()) return missing_note;
  return plot_block(spec, data.series, what) + missing_note;
}

bool has_p2p_rows(const json& bench, const std::string& provider, const std::string& test) {
  for (const auto& entry : list(bench, "p2p")) {
    if (text(entry, "provider") == provider && text(entry, "test") == test && !list(entry, "results").empty()) {
      return true;
    }
  }
  return false;
}

std::string p2p_section(const json& bench) {
  std::string out =
      "<h2>Point-to-point</h2>\n<p class=\"meta\">Two ranks, perftest style: one line per provider "
      "and test. " +
      style_key() + "</p>\n";
  PlotSpec lat;
  lat.title = "Point-to-point latency (typical)";
  lat.x_title = kSizeTitle;
  lat.y_title = std::string("Latency, typical (") + kMicro + ", log scale)";
  lat.y_unit = kMicro;
  lat.width = kFullWidth;
  out += "<h3>Latency</h3>\n" + p2p_plot(bench, "_lat", lat, "latency");
  if (has_p2p_rows(bench, "shm", "read_lat") && has_p2p_rows(bench, "shm", "write_lat")) {
    out += "<p class=\"meta\">" + std::string(kShmReadBelowWrite) + "</p>\n";
  }
  PlotSpec bw;
  bw.title = "Point-to-point bandwidth (average)";
  bw.x_title = kSizeTitle;
  // Small messages sit decades below the peak; a log axis keeps them visible.
  bw.y_title = "Bandwidth, average (GB/s, log scale)";
  bw.y_unit = "GB/s";
  bw.width = kFullWidth;
  out += "<h3>Bandwidth</h3>\n" + p2p_plot(bench, "_bw", bw, "bandwidth");
  return out;
}

// ---------------------------------------------------------------------------
// Collectives

std::string coll_setup(const json& entry) {
  return text(entry, "type") + ", " + text(entry, "redop") + ", " + plural(number(entry, "np"), "rank", "ranks");
}

struct CollGroup {
  std::string name;
  std::vector<const json*> entries;
};

std::vector<CollGroup> coll_groups(const json& bench) {
  std::vector<CollGroup> groups;
  for (const auto& entry : list(bench, "coll")) {
    const std::string name = text(entry, "collective");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const CollGroup& g) { return g.name == name; });
    if (it == groups.end()) it = groups.insert(groups.end(), CollGroup{name, {}});
    it->entries.push_back(&entry);
  }
  return groups;
}

// One series per entry and placement; the setup (type, redop, ranks) joins
// the label only when entries of the collective differ in it.
std::vector<PlotSeries> coll_series(const json& bench, const CollGroup& g, const char* value_key, bool same_setup) {
  std::vector<PlotSeries> out;
  for (const json* entry : g.entries) {
    for (const bool inplace : {false, true}) {
      PlotSeries s;
      s.label = text(*entry, "provider") + (same_setup ? "" : " (" + coll_setup(*entry) + ")") +
                (inplace ? ", in place" : ", out of place");
      apply(s, bench, text(*entry, "provider"), inplace ? kInPlaceStyle : kOutOfPlaceStyle);
      for (const auto& row : list(*entry, "results")) {
        const bool row_inplace = flag(row, "inplace");
        const auto bytes = number(row, "bytes");
        const auto y = number(row, value_key);
        if (row_inplace == inplace && bytes && y) s.points.push_back({*bytes, *y});
      }
      if (!s.points.empty()) out.push_back(std::move(s));
    }
  }
  return out;
}

std::string wrong_note(const CollGroup& g) {
  std::string out;
  for (const json* entry : g.entries) {
    int wrong_rows = 0;
    for (const auto& row : list(*entry, "results")) {
      if (number(row, "wrong").value_or(0) > 0) ++wrong_rows;
    }
    if (wrong_rows > 0) {
      out +=
          note("<b>" + esc(*entry, "provider") + "</b>: " + std::to_string(wrong_rows) + " row(s) with wrong results.");
    }
  }
  return out;
}

std::string coll_group_section(const json& bench, const CollGroup& g) {
  bool same_setup = true;
  for (const json* entry : g.entries) same_setup = same_setup && coll_setup(*entry) == coll_setup(*g.entries.front());
  std::string out = "<h3>" + html_escape(g.name) + "</h3>\n";
  if (same_setup) out += "<p class=\"meta\">" + html_escape(coll_setup(*g.entries.front())) + "</p>\n";
  PlotSpec time;
  time.title = g.name + ": time per call";
  time.x_title = kSizeTitle;
  time.y_title = std::string("Time (") + kMicro + ", log scale)";
  time.y_unit = kMicro;
  time.width = kHalfWidth;
  PlotSpec busbw;
  busbw.title = g.name + ": bus bandwidth";
  busbw.x_title = kSizeTitle;
  busbw.y_title = "Bus bandwidth (GB/s, log scale)";
  busbw.y_unit = "GB/s";
  busbw.width = kHalfWidth;
  const auto time_series = coll_series(bench, g, "time_us", same_setup);
  const auto bw_series = coll_series(bench, g, "busbw_GBps", same_setup);
  const std::string time_svg = render_svg_plot(time, time_series);
  const std::string bw_svg = render_svg_plot(busbw, bw_series);
  if (time_svg.empty() && bw_svg.empty()) return out + note("No " + html_escape(g.name) + " results to plot.");
  out += "<div class=\"pair plot\">" + time_svg + bw_svg + "</div>\n";
  out += series_table(time_series, time.title + " (" + kMicro + ")");
  out += series_table(bw_series, busbw.title + " (GB/s)");
  return out + wrong_note(g);
}

std::string coll_section(const json& bench) {
  std::string out =
      "<h2>Collectives</h2>\n<p class=\"meta\">nccl-tests style sweeps, one colour per provider (as above): solid "
      "lines and filled circles out of place, dashed lines and open squares in place. Bus bandwidth scales algorithm "
      "bandwidth by the collective's bus factor, so collectives compare with one another and with the link.</p>\n";
  const auto groups = coll_groups(bench);
  if (groups.empty()) return out + note("No collective results in this file.");
  std::vector<std::string> with_rows;
  for (const auto& entry : list(bench, "coll")) {
    if (!list(entry, "results").empty()) with_rows.push_back(text(entry, "provider"));
  }
  for (const auto& g : groups) out += coll_group_section(bench, g);
  const auto missing = missing_providers(bench, with_rows);
  if (!missing.empty()) out += note("No collective results for " + comma_list(missing) + " (see Errors).");
  return out;
}

// ---------------------------------------------------------------------------
// Errors and footer

std::string errors_section(const json& bench) {
  std::string out = "<h2>Errors</h2>\n";
  const json& errors = list(bench, "errors");
  if (errors.empty()) return out + "<p class=\"meta\">No step failed.</p>\n";
  out +=
      "<p class=\"meta\">These steps failed; the bench went on without them.</p>\n"
      "<table>\n<tr><th>Provider</th><th>Step</th><th>Message</th></tr>\n";
  for (const auto& e : errors) {
    out += "<tr><td>" + esc(e, "provider") + "</td><td>" + esc(e, "what") + "</td><td>" + esc(e, "message") +
           "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string page_foot(const json& bench) {
  return "<footer>Written by rdmx " + esc(bench, "rdmx_version") + " from a " + esc(bench, "schema") +
         " results document (docs/schemas/bench.schema.json). The page is self-contained: no script, nothing "
         "fetched.</footer>\n</body>\n</html>\n";
}

}  // namespace

std::string render_html_report(const nlohmann::json& bench) {
  return page_head(bench) + header_section(bench) + providers_section(bench) + summary_section(bench) +
         p2p_section(bench) + coll_section(bench) + errors_section(bench) + page_foot(bench);
}

const char* report_style() { return kStyle; }

}  // namespace rdmx::cli
