// SPDX-License-Identifier: MIT
// The bench report page (tools/rdmx/report/report_html.cpp): a sample results
// document must match docs/schemas/bench.schema.json, and the page rendered
// from it must be self-contained, escaped, and hold every plot and table.
//
// Set RDMX_REPORT_SAMPLE_HTML=/some/file.html to keep the sample page for a
// look in a browser (or a headless screenshot).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "json_schema.hpp"
#include "report/report_html.hpp"
#include "report/svg_plot.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;
using rdmx::cli::render_html_report;

const std::string kMicro = "\xc2\xb5s";

json latency_rows(double base_us) {
  json rows = json::array();
  for (const int bytes : {2, 64, 1024, 4096, 65536}) {
    const double t = base_us + bytes / 5000.0;
    rows.push_back({{"bytes", bytes},
                    {"iterations", 1000},
                    {"t_min_us", t * 0.9},
                    {"t_max_us", t * 4},
                    {"t_typical_us", t},
                    {"t_avg_us", t * 1.1},
                    {"t_stdev_us", t * 0.1},
                    {"p99_us", t * 1.5},
                    {"p999_us", t * 3}});
  }
  return rows;
}

json bandwidth_rows(double peak_gb_s) {
  json rows = json::array();
  for (const int bytes : {1024, 65536, 1048576}) {
    const double gb = peak_gb_s * bytes / (bytes + 8192.0);
    rows.push_back({{"bytes", bytes},
                    {"iterations", 5000},
                    {"bw_peak_mib_s", gb * 1.1e9 / 1048576},
                    {"bw_avg_mib_s", gb * 1e9 / 1048576},
                    {"msg_rate_mpps", gb * 1e3 / bytes},
                    {"bw_avg_gb_s", gb}});
  }
  return rows;
}

json allreduce_rows(double base_us, double gb_s) {
  json rows = json::array();
  for (const int bytes : {8, 4096, 1048576}) {
    for (const bool inplace : {false, true}) {
      const double t = base_us + bytes / (gb_s * 1e3);
      rows.push_back({{"bytes", bytes},
                      {"count", bytes / 4},
                      {"type", "float"},
                      {"redop", "sum"},
                      {"root", -1},
                      {"inplace", inplace},
                      {"time_us", t},
                      {"algbw_GBps", bytes / t / 1e3},
                      {"busbw_GBps", bytes / t / 1e3},
                      {"wrong", inplace ? -1 : 0},
                      {"iters", 100}});
    }
  }
  return rows;
}

json summary_entry(const std::string& provider, double lat, double bw) {
  return {{"provider", provider},
          {"best_latency_us", lat},
          {"best_latency_test", "write_lat"},
          {"best_latency_bytes", 2},
          {"best_bw_gb_s", bw},
          {"best_bw_test", "write_bw"},
          {"best_bw_bytes", 1048576},
          {"allreduce_busbw_GBps",
           json::array({{{"bytes", 4096}, {"busbw_GBps", bw / 8}}, {{"bytes", 1048576}, {"busbw_GBps", bw / 2}}})}};
}

json empty_bench() {
  return {
      {"schema", "rdmx.bench/1"},
      {"rdmx_version", "0.1.0"},
      {"started", "2026-11-22T15:47:44Z"},
      {"duration_s", 80.1},
      {"host", {{"hostname", "testhost"}, {"cores", 2}, {"logical_cpus", 2}, {"numa_nodes", 1}}},
      {"ranks", 2},
      {"quick", true},
      {"providers",
       json::array(
           {{{"name", "verbs"}, {"usable", false}, {"reason", "not built: libibverbs not found"}, {"device", ""}}})},
      {"p2p", json::array()},
      {"coll", json::array()},
      {"summary", json::array()},
      {"errors", json::array()}};
}

// Two usable providers with latency, bandwidth and all_reduce rows, one
// unusable provider, and one failed step.
json sample_bench() {
  json doc = empty_bench();
  doc["quick"] = false;
  doc["providers"] = json::array(
      {{{"name", "shm"}, {"usable", true}, {"reason", "shared memory in /dev/shm"}, {"device", "shm:host"}},
       {{"name", "tcp"}, {"usable", true}, {"reason", "interface lo"}, {"device", "tcp:lo"}},
       {{"name", "verbs"}, {"usable", false}, {"reason", "not built: libibverbs not found"}, {"device", ""}}});
  for (const auto& [provider, lat, bw] : {std::tuple{"shm", 0.25, 9.0}, std::tuple{"tcp", 14.0, 2.0}}) {
    doc["p2p"].push_back({{"provider", provider}, {"test", "write_lat"}, {"results", latency_rows(lat)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "read_lat"}, {"results", latency_rows(lat * 0.8)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "send_lat"}, {"results", latency_rows(lat * 1.5)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "atomic_lat"}, {"results", latency_rows(lat * 2)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "write_bw"}, {"results", bandwidth_rows(bw)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "read_bw"}, {"results", bandwidth_rows(bw * 0.7)}});
    doc["p2p"].push_back({{"provider", provider}, {"test", "send_bw"}, {"results", bandwidth_rows(bw * 0.5)}});
    doc["coll"].push_back({{"provider", provider},
                           {"collective", "all_reduce"},
                           {"np", 2},
                           {"type", "float"},
                           {"redop", "sum"},
                           {"results", allreduce_rows(lat * 5, bw / 2)}});
    doc["summary"].push_back(summary_entry(provider, lat, bw));
  }
  doc["errors"].push_back(
      {{"provider", "tcp"}, {"what", "perf p2p read_bw"}, {"message", "rank 1 timed out after 20 s"}});
  return doc;
}

// The legends' text, each from its group to the end of its plot.
std::string legends(const std::string& page) {
  std::string out;
  for (auto at = page.find("class=\"legend\""); at != std::string::npos; at = page.find("class=\"legend\"", at + 1)) {
    out += page.substr(at, page.find("</svg>", at) - at);
  }
  return out;
}

// The sample page, also written where RDMX_REPORT_SAMPLE_HTML says.
std::string render_and_keep(const json& doc) {
  const std::string page = render_html_report(doc);
  if (const char* path = std::getenv("RDMX_REPORT_SAMPLE_HTML")) std::ofstream(path) << page;
  return page;
}

TEST(ReportHtml, SampleMatchesTheSchema) {
  const json schema = load_schema("bench.schema.json");
  EXPECT_EQ(validate_json(sample_bench(), schema), std::vector<std::string>{});
  EXPECT_EQ(validate_json(empty_bench(), schema), std::vector<std::string>{});
}

TEST(ReportHtml, SchemaRejectsWhatTheDocumentNeverHolds) {
  const json schema = load_schema("bench.schema.json");
  json doc = sample_bench();
  doc["p2p"][0]["test"] = "write_latency";
  doc["p2p"][0]["results"][0]["t_typ_us"] = 1.0;
  doc["coll"][0]["results"][0].erase("inplace");
  doc["schema"] = "rdmx.bench/2";
  doc["extra"] = true;
  EXPECT_EQ(validate_json(doc, schema).size(), 5u) << ::testing::PrintToString(validate_json(doc, schema));
}

TEST(ReportHtml, PageIsSelfContained) {
  std::string page = render_and_keep(sample_bench());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(occurrences(page, "<script"), 0u);
  EXPECT_EQ(occurrences(page, "<link"), 0u);
  EXPECT_EQ(occurrences(page, "url("), 0u);
  EXPECT_EQ(occurrences(page, "@import"), 0u);
  EXPECT_EQ(occurrences(page, " src="), 0u);
  // The SVG namespace is a name, never fetched; no other address may appear.
  const std::string xmlns = "xmlns=\"http://www.w3.org/2000/svg\"";
  EXPECT_EQ(occurrences(page, xmlns), occurrences(page, "<svg"));
  for (auto at = page.find(xmlns); at != std::string::npos; at = page.find(xmlns)) page.erase(at, xmlns.size());
  EXPECT_EQ(occurrences(page, "http://"), 0u);
  EXPECT_EQ(occurrences(page, "https://"), 0u);
}

TEST(ReportHtml, OnePlotEachWithTitledAxes) {
  const std::string page = render_html_report(sample_bench());
  // p2p latency, p2p bandwidth, all_reduce time, all_reduce bus bandwidth.
  EXPECT_EQ(occurrences(page, "<svg"), 4u);
  EXPECT_EQ(occurrences(page, "</svg>"), 4u);
  EXPECT_EQ(occurrences(page, "Message size (bytes, log2 scale)"), 4u);
  EXPECT_NE(page.find("Latency, typical (" + kMicro + ", log scale)"), std::string::npos);
  EXPECT_NE(page.find("Bandwidth, average (GB/s, log scale)"), std::string::npos);
  EXPECT_NE(page.find("Time (" + kMicro + ", log scale)"), std::string::npos);
  EXPECT_NE(page.find("Bus bandwidth (GB/s, log scale)"), std::string::npos);
  // Size labels in binary units on the log2 axis.
  EXPECT_NE(page.find(">1 KiB</text>"), std::string::npos);
  EXPECT_NE(page.find(">1 MiB</text>"), std::string::npos);
}

TEST(ReportHtml, LegendsNameEveryProvider) {
  const std::string legend = legends(render_html_report(sample_bench()));
  for (const char* label :
       {">shm write_lat<", ">tcp write_lat<", ">shm send_lat<", ">tcp send_lat<", ">shm write_bw<", ">tcp write_bw<",
        ">shm, out of place<", ">shm, in place<", ">tcp, out of place<", ">tcp, in place<"}) {
    EXPECT_NE(legend.find(label), std::string::npos) << label;
  }
}

TEST(ReportHtml, TablesShowProvidersSummaryAndErrors) {
  const std::string page = render_html_report(sample_bench());
  EXPECT_NE(page.find("not built: libibverbs not found"), std::string::npos);
  EXPECT_NE(page.find("rank 1 timed out after 20 s"), std::string::npos);
  EXPECT_NE(page.find("perf p2p read_bw"), std::string::npos);
  EXPECT_NE(page.find("0.25 " + kMicro), std::string::npos);  // shm's best latency
  EXPECT_NE(page.find("write_bw, 1 MiB"), std::string::npos);
  EXPECT_NE(page.find("<th>4 KiB</th>"), std::string::npos);  // all_reduce busbw column
  EXPECT_NE(page.find("testhost"), std::string::npos);
  EXPECT_NE(page.find("2026-11-22T15:47:44Z"), std::string::npos);
}

TEST(ReportHtml, TextFromTheDocumentIsEscaped) {
  json doc = sample_bench();
  const std::string evil = "x<b>&y";
  doc["providers"][0]["name"] = evil;
  doc["providers"][2]["reason"] = "needs <rdma> & \"ib\"";
  doc["p2p"][0]["provider"] = evil;
  doc["p2p"][1]["test"] = "z<b>&_lat";
  doc["coll"][0]["provider"] = evil;
  doc["summary"][0]["provider"] = evil;
  doc["errors"][0]["message"] = "<b>&oops";
  doc["host"]["hostname"] = "<h>";
  const std::string page = render_html_report(doc);
  // The page's own markup has <b> elements, so look for the raw strings whole.
  EXPECT_EQ(occurrences(page, evil), 0u);
  EXPECT_EQ(occurrences(page, "z<b>&"), 0u);
  EXPECT_EQ(occurrences(page, "<b>&oops"), 0u);
  EXPECT_EQ(occurrences(page, "<h>"), 0u);
  EXPECT_EQ(occurrences(page, "<rdma>"), 0u);
  EXPECT_NE(page.find("x&lt;b&gt;&amp;y"), std::string::npos);
  EXPECT_NE(page.find("z&lt;b&gt;&amp;_lat"), std::string::npos);
  EXPECT_NE(page.find("needs &lt;rdma&gt; &amp; &quot;ib&quot;"), std::string::npos);
  EXPECT_NE(page.find("&lt;b&gt;&amp;oops"), std::string::npos);
  EXPECT_NE(legends(page).find(">x&lt;b&gt;&amp;y write_lat<"), std::string::npos);
}

TEST(ReportHtml, NoResultsRenderNotesNotPlots) {
  const std::string page = render_html_report(empty_bench());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(occurrences(page, "<svg"), 0u);
  EXPECT_NE(page.find("No latency results to plot."), std::string::npos);
  EXPECT_NE(page.find("No bandwidth results to plot."), std::string::npos);
  EXPECT_NE(page.find("No collective results in this file."), std::string::npos);
  EXPECT_NE(page.find("no summary"), std::string::npos);
  EXPECT_NE(page.find("No step failed."), std::string::npos);
  EXPECT_NE(page.find("not built: libibverbs not found"), std::string::npos);
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

TEST(ReportHtml, ProviderWithoutRowsGetsANote) {
  json doc = sample_bench();
  // tcp's latency steps failed: its entries are gone, shm's remain.
  json kept = json::array();
  for (const auto& entry : doc["p2p"]) {
    if (!(entry["provider"] == "tcp" && entry["test"].get<std::string>().ends_with("_lat"))) kept.push_back(entry);
  }
  doc["p2p"] = kept;
  doc["coll"][1]["results"] = json::array();
  const std::string page = render_html_report(doc);
  EXPECT_EQ(occurrences(page, "<svg"), 4u);
  EXPECT_NE(page.find("No latency results for <b>tcp</b>"), std::string::npos);
  EXPECT_NE(page.find("No collective results for <b>tcp</b>"), std::string::npos);
}

TEST(ReportHtml, MalformedDocumentsDoNotThrow) {
  EXPECT_NO_THROW(render_html_report(json::object()));
  EXPECT_NO_THROW(render_html_report(json::array()));
  EXPECT_NO_THROW(render_html_report(json::parse(R"({"p2p": "oops", "coll": [1, null, {"results": 3}],
      "providers": [{"name": 5, "usable": "yes"}], "summary": [{"best_latency_us": null}], "errors": [7]})")));
  json doc = sample_bench();
  doc["p2p"][0]["results"][0]["t_typical_us"] = 0;  // cannot sit on a log axis: left out, not drawn at -inf
  doc["p2p"][0]["results"][1]["bytes"] = 0;
  const std::string page = render_html_report(doc);
  EXPECT_EQ(occurrences(page, "nan"), 0u);
  EXPECT_EQ(occurrences(page, "inf"), 0u);
}

// The terminal summary's caveat (bench.cpp prints kSameHostCaveat too).
TEST(ReportHtml, CarriesTheSameHostCaveat) {
  const std::string page = render_html_report(sample_bench());
  EXPECT_NE(page.find(cli::kSameHostCaveat), std::string::npos);
  EXPECT_NE(page.find("tcp runs over loopback"), std::string::npos);
  EXPECT_NE(page.find("same-host bandwidth is a CPU copy rate"), std::string::npos);
  EXPECT_NE(render_html_report(empty_bench()).find(cli::kSameHostCaveat), std::string::npos);
}

// shm's read_lat below its write_lat looks like a bug; the page says why it is not.
TEST(ReportHtml, ExplainsWhyShmReadLatencyCanBeatWrite) {
  const std::string page = render_html_report(sample_bench());
  const auto at = page.find("Why shm's read_lat can sit below its write_lat");
  ASSERT_NE(at, std::string::npos);
  const std::string why = page.substr(at, page.find("</p>", at) - at);
  EXPECT_NE(why.find("one copy that the reader makes itself"), std::string::npos) << why;
  EXPECT_NE(why.find("half a ping-pong"), std::string::npos) << why;
  // Only where there is something to explain.
  json doc = sample_bench();
  json kept = json::array();
  for (const auto& entry : doc["p2p"]) {
    if (!(entry["provider"] == "shm" && entry["test"] == "read_lat")) kept.push_back(entry);
  }
  doc["p2p"] = kept;
  EXPECT_EQ(render_html_report(doc).find("Why shm's read_lat"), std::string::npos);
}

// Every drawn line as (plot index, label, colour, dash pattern), from the
// series groups: <g><title>label</title><polyline ... stroke="c" [stroke-dasharray="d"] ...
struct DrawnLine {
  int plot;
  std::string label, colour, dash;
};

std::vector<DrawnLine> drawn_lines(const std::string& page) {
  std::vector<DrawnLine> lines;
  int plot = -1;
  const std::regex line_re(
      R"re(<g><title>([^<]*)</title><polyline fill="none" stroke-width="2" stroke="([^"]*)"(?: stroke-dasharray="([^"]*)")? points=)re");
  for (std::size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) {
    ++plot;
    const std::string svg = page.substr(at, page.find("</svg>", at) - at);
    for (std::sregex_iterator it(svg.begin(), svg.end(), line_re), end; it != end; ++it) {
      lines.push_back({plot, (*it)[1].str(), (*it)[2].str(), (*it)[3].str()});
    }
  }
  return lines;
}

// The provider is the label's first word; the test the rest ("write_lat", "out of place").
std::pair<std::string, std::string> provider_and_test(const std::string& label) {
  const auto cut = label.find_first_of(" ,");
  std::string test = label.substr(cut + 1);
  if (!test.empty() && test.front() == ' ') test.erase(0, 1);
  return {label.substr(0, cut), test};
}

TEST(ReportHtml, OneColourPerProviderAndOneLineStylePerTestInEveryPlot) {
  const std::string page = render_html_report(sample_bench());
  const auto lines = drawn_lines(page);
  ASSERT_EQ(lines.size(), 2u * 4 + 2u * 3 + 2u * 2 * 2) << "latency, bandwidth, all_reduce time and busbw";
  std::map<std::string, std::set<std::string>> colours_of_provider, dashes_of_test;
  std::map<std::string, std::set<std::string>> providers_of_colour;
  for (const auto& l : lines) {
    const auto [provider, test] = provider_and_test(l.label);
    colours_of_provider[provider].insert(l.colour);
    providers_of_colour[l.colour].insert(provider);
    // write_lat and write_bw are one operation, drawn alike.
    dashes_of_test[test.substr(0, test.find('_'))].insert(l.dash);
  }
  EXPECT_EQ(colours_of_provider.size(), 2u);
  for (const auto& [provider, colours] : colours_of_provider) {
    EXPECT_EQ(colours.size(), 1u) << provider << " is drawn in " << ::testing::PrintToString(colours);
  }
  for (const auto& [colour, providers] : providers_of_colour) {
    EXPECT_EQ(providers.size(), 1u) << colour << " is used for " << ::testing::PrintToString(providers);
  }
  for (const auto& [test, dashes] : dashes_of_test) {
    EXPECT_EQ(dashes.size(), 1u) << test << " is drawn as " << ::testing::PrintToString(dashes);
  }
  // Within a plot, different tests look different, and the legend draws them the same way.
  for (int plot = 0; plot < 4; ++plot) {
    std::map<std::string, std::string> test_of_dash;
    for (const auto& l : lines) {
      if (l.plot != plot) continue;
      const std::string test = provider_and_test(l.label).second;
      const auto [it, fresh] = test_of_dash.emplace(l.dash, test);
      EXPECT_TRUE(fresh || it->second == test)
          << "plot " << plot << ": " << test << " and " << it->second << " share the dash pattern '" << l.dash << "'";
    }
  }
  const std::string legend = legends(page);
  EXPECT_NE(legend.find("stroke-dasharray=\"9 4\""), std::string::npos);  // read, and in place
  EXPECT_NE(legend.find("stroke-dasharray=\"2 3\""), std::string::npos);  // send
  EXPECT_NE(page.find("one line style per test: write: solid line, circles; read: dashed, squares"), std::string::npos);
}

TEST(SvgPlot, FormatsSizesInBinaryUnits) {
  EXPECT_EQ(cli::format_bytes(4), "4 B");
  EXPECT_EQ(cli::format_bytes(1024), "1 KiB");
  EXPECT_EQ(cli::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(cli::format_bytes(1048576), "1 MiB");
  EXPECT_EQ(cli::format_bytes(std::ldexp(1.0, 30)), "1 GiB");
}

TEST(SvgPlot, NothingDrawableGivesNoPlot) {
  cli::PlotSpec spec;
  spec.title = "t";
  EXPECT_EQ(cli::render_svg_plot(spec, {}), "");
  EXPECT_EQ(cli::render_svg_plot(spec, {cli::PlotSeries{"empty", {}}}), "");
  EXPECT_EQ(cli::render_svg_plot(spec, {cli::PlotSeries{"zero", {{8, 0}}}}), "");  // log y axis
  spec.y_log = false;
  EXPECT_NE(cli::render_svg_plot(spec, {cli::PlotSeries{"zero", {{8, 0}}}}), "");
}

}  // namespace
}  // namespace rdmx::test
