// SPDX-License-Identifier: MIT
#include "plan/report_page.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "plan/planner.hpp"
#include "report/report_html.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli::plan {
namespace {

using nlohmann::json;

std::string text(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? html_escape(j[key].get<std::string>()) : std::string();
}

double num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0; }

std::string cell(double v, int digits = 3) { return "<td class=\"num\">" + format_number(v, digits) + "</td>"; }

// Times to the hundredth of a millisecond: a step and its compute differ by
// the exposed communication, which three significant digits could hide
// (104.3 and 103.9 both printed "104").
std::string cell_ms(double ms) { return "<td class=\"num\">" + format_printf("%.2f", ms) + "</td>"; }

// The fabrics in the order the plan asked for them (its rows are fabric
// major), not the JSON object's alphabetical order.
std::vector<std::string> fabric_order(const json& plan) {
  std::vector<std::string> order;
  const auto add = [&order](const std::string& name) {
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  };
  for (const auto& row : plan["rows"]) add(row.value("fabric", ""));
  for (const auto& [name, f] : plan["fabrics"].items()) add(name);
  return order;
}

std::string plot(const json& plan, const char* key, const std::string& title, const std::string& y_title,
                 const std::string& unit, double scale, bool y_log) {
  std::map<std::string, PlotSeries> series;
  std::vector<std::string> order;
  for (const auto& row : plan["rows"]) {
    const std::string fabric = row.value("fabric", "");
    if (!series.count(fabric)) {
      order.push_back(fabric);
      series[fabric].label = fabric;
    }
    series[fabric].points.push_back({num(row, "nodes"), num(row, key) * scale});
  }
  std::vector<PlotSeries> list;
  for (const auto& name : order) list.push_back(series[name]);
  PlotSpec spec;
  spec.title = title;
  spec.x_title = "nodes";
  spec.x_bytes = false;
  spec.y_title = y_title;
  spec.y_unit = unit;
  spec.y_log = y_log;
  spec.width = 1000;
  spec.height = 380;
  const std::string svg = render_svg_plot(spec, list);
  return svg.empty() ? "<p class=\"note\">Nothing to plot.</p>" : "<div class=\"plot\">" + svg + "</div>";
}

// The efficiency with its band: the network as much slower and faster as
// the published clusters on its transport were against the model.
std::string efficiency_cell(const json& row) {
  const auto percent = [](double v) { return format_printf("%.1f", v * 100); };
  std::string out = "<td class=\"num\">" + percent(num(row, "efficiency"));
  if (row.contains("efficiency_band") && row["efficiency_band"].size() == 2) {
    const auto& band = row["efficiency_band"];
    out +=
        " <span class=\"dim\">(" + percent(band[0].get<double>()) + "-" + percent(band[1].get<double>()) + ")</span>";
  }
  return out + "</td>";
}

// The published measurements of real clusters the model was checked
// against, with its error on each (docs/ADVISOR.md, "Validation on real
// clusters").
std::string validated_against(const json& plan) {
  if (!plan.contains("validated_against")) return "";
  const json& v = plan["validated_against"];
  std::string rows;
  int within = 0;
  for (const auto& r : v["rows"]) {
    const bool collective = r.value("kind", "") == "collective";
    const auto value = [collective](double x) {
      return collective ? format_number(x) + " GB/s" : format_number(x * 100) + "%";
    };
    const bool in = r.value("within_bound", false);
    within += in ? 1 : 0;
    // "fitted: the socket share ..." or "checked: ...": the first word in
    // the table, the rest on hover.
    const std::string role = r.value("role", "");
    rows += "<tr><td>" + text(r, "label") + "</td><td>" + text(r, "transport") + "</td><td class=\"num\">" +
            value(num(r, "published")) + "</td><td class=\"num\">" + value(num(r, "modelled")) +
            "</td><td class=\"num\">" + text(r, "error_text") + "</td><td>" + (in ? "within" : "<b>outside</b>") +
            "</td><td title=\"" + html_escape(role) + "\">" + html_escape(role.substr(0, role.find(':'))) +
            "</td><td class=\"dim\">" + text(r, "source") + "</td></tr>\n";
    if (!in) rows += "<tr><td></td><td colspan=\"7\" class=\"dim\">Explained: " + text(r, "explained") + "</td></tr>\n";
  }
  std::string out = "<h2>Validated against</h2>\n<p class=\"note\">" + std::to_string(within) + " of " +
                    std::to_string(v["rows"].size()) +
                    " published measurements of real clusters within their bound (bus bandwidth within " +
                    format_number(num(v, "collective_relative_bound") * 100) + "%, scaling efficiency within " +
                    format_number(num(v, "scaling_points_bound")) +
                    " points); the others are explained. Each efficiency above carries the band these errors give: "
                    "the network as much slower and faster as the published clusters on its transport were "
                    "against the model.</p>\n";
  out +=
      "<table><tr><th>case</th><th>transport</th><th>published</th><th>modelled</th><th>error</th><th>bound</th>"
      "<th>constant fitted to it?</th><th>source</th></tr>\n" +
      rows + "</table>\n";
  return out;
}

}  // namespace

std::string render_plan_html(const json& plan) {
  const json& model = plan.contains("model") ? plan["model"] : json::object();
  const bool priced = plan.contains("prices");
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>rdmx plan: " +
      text(model, "name") + "</title>\n<style>" + report_style() + "</style>\n</head>\n<body>\n";
  out += "<h1>rdmx plan: " + text(model, "name") + "</h1>\n";
  out += "<p class=\"meta\">" + text(model, "origin") + ": " + text(model, "source") + "</p>\n";
  out += "<p class=\"meta\">" + format_number(num(plan, "gpus_per_node")) + " GPUs per node; collectives as " +
         text(plan, "library") + " runs them; links " + text(plan, "links") + "; target scaling efficiency " +
         format_number(num(plan, "target_efficiency") * 100) + "%</p>\n";
  if (plan.contains("recommendation")) {
    const auto& r = plan["recommendation"];
    out += "<p class=\"note\"><b>Recommended: " +
           (r["fabric"].is_string() ? html_escape(r["fabric"].get<std::string>()) : std::string("none")) + "</b>. " +
           text(r, "why") + ".</p>\n";
  }
  if (plan.contains("hinges") && !plan["hinges"].empty()) {
    out += "<ul class=\"notes\">";
    for (const auto& h : plan["hinges"]) out += "<li>Hinges on: " + text(h, "text") + "</li>";
    out += "</ul>\n";
  }
  if (plan.contains("notes") && !plan["notes"].empty()) {
    out += "<ul class=\"notes\">";
    for (const auto& note : plan["notes"]) out += "<li>" + html_escape(note.get<std::string>()) + "</li>";
    out += "</ul>\n";
  }
  // Curves over node counts; with one node count the tables below say all.
  if (plan.contains("nodes") && plan["nodes"].size() > 1) {
    out += "<h2>Throughput and efficiency</h2>\n";
    out += "<div class=\"pair\">" + plot(plan, "samples_per_s", "Throughput", "samples/s", "samples/s", 1, true) +
           plot(plan, "efficiency", "Scaling efficiency against one GPU", "efficiency, %", "%", 100, false) +
           "</div>\n";
  }
  out += "<h2>Per fabric</h2>\n";
  for (const std::string& name : fabric_order(plan)) {
    if (!plan["fabrics"].contains(name)) continue;
    const json& f = plan["fabrics"][name];
    out += "<h3>" + html_escape(name) + " (" + format_number(num(f, "nics_per_node")) + "x" +
           format_number(num(f, "nic_gbit")) + "G)</h3>\n<p class=\"dim\">" + text(f, "description") + "; latency " +
           format_number(num(f, "latency_us")) + " us, " + format_number(num(f, "nics_per_node")) + " x " +
           format_number(num(f, "nic_gbit")) + " Gbit/s at " + format_number(num(f, "efficiency") * 100) + "%" +
           (f.value("gpudirect", false) ? ", GPUDirect" : ", staged through host memory") +
           (f.value("transport", "rdma") == "socket" ? ", NCCL's socket transport" : "") + "; " + text(f, "gpu") +
           " nodes</p>\n";
    out +=
        "<table><tr><th>nodes</th><th>step, ms</th><th>compute, ms</th><th>exposed comm., ms</th>"
        "<th>samples/s</th><th>efficiency (band), %</th>";
    if (priced) out += "<th>cost/hour</th><th>cost/1M samples</th>";
    out += "<th>collectives (algorithm, ms)</th></tr>\n";
    for (const auto& row : plan["rows"]) {
      if (row.value("fabric", "") != name) continue;
      std::string colls;
      for (const auto& c : row["collectives"]) {
        colls += (colls.empty() ? "" : "; ") + text(c, "op") + " " + html_escape(format_bytes(num(c, "bytes"))) + ": " +
                 text(c, "algo") + (c.value("protocol", "").empty() ? "" : "/" + text(c, "protocol")) + " " +
                 format_number(num(c, "ms"));
      }
      out += "<tr>" + cell(num(row, "nodes")) + cell_ms(num(row, "step_ms")) + cell_ms(num(row, "compute_ms")) +
             cell_ms(num(row, "exposed_comm_ms")) + cell(num(row, "samples_per_s"), 4) + efficiency_cell(row) +
             (priced ? cell(num(row, "cost_per_hour")) : "") +
             (priced ? cell(num(row, "cost_per_million_samples")) : "") + "<td class=\"dim\">" + colls + "</td></tr>\n";
    }
    out += "</table>\n";
    if (f.contains("sources")) {
      out += "<details><summary>sources of " + html_escape(name) + "'s values</summary><ul>";
      for (const auto& [field, source] : f["sources"].items()) {
        out += "<li><b>" + html_escape(field) +
               "</b>: " + (source.is_string() ? html_escape(source.get<std::string>()) : std::string()) + "</li>";
      }
      out += "</ul></details>\n";
    }
  }
  out += validated_against(plan);
  out += "<footer>Written by rdmx plan. The model and its validation: docs/ADVISOR.md.</footer>\n</body>\n</html>\n";
  return out;
}

}  // namespace rdmx::cli::plan
