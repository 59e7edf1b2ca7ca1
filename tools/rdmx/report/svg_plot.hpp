// SPDX-License-Identifier: MIT
// Line plots as inline SVG for the bench report (report_html.cpp). The page
// must open offline, so plots are plain SVG text: no script, and hover
// details come from SVG <title> elements.
#pragma once

#include <string>
#include <vector>

namespace rdmx::cli {

// Escapes &, <, >, " and ' so any text from a results file is safe in HTML
// or SVG, as element text or inside a quoted attribute.
std::string html_escape(const std::string& text);

// "4 B", "1 KiB", "1.5 MiB": binary units, as message sizes are powers of two.
std::string format_bytes(double bytes);

// A number with `digits` significant digits, without exponent for the range
// a report shows (0.001 .. 1e6).
std::string format_number(double value, int digits = 3);

struct PlotPoint {
  double x = 0;  // message size, bytes
  double y = 0;
};

struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> points;
  std::string dash;     // SVG stroke-dasharray ("8 4"); empty: a solid line
  int colour = -1;      // palette index; -1: the series' position
  int marker = -1;      // marker shape index; -1: the series' position
  bool hollow = false;  // outlined markers, so a filled one beneath still shows
};

struct PlotSpec {
  std::string title;
  std::string x_title;  // the x axis is log2: bytes, or counts (nodes) when !x_bytes
  bool x_bytes = true;
  std::string y_title;
  std::string y_unit;  // appended to values in tooltips ("us", "GB/s")
  bool y_log = true;
  int width = 1100;  // SVG user units; the page shows them about 1:1
  int height = 420;  // plot area and axes; the legend adds rows below
};

// The plot, or an empty string when no series has a point that the axes can
// show (the caller prints a note instead of an empty frame). Series without
// such a point are left out of the legend too.
std::string render_svg_plot(const PlotSpec& spec, const std::vector<PlotSeries>& series);

}  // namespace rdmx::cli
