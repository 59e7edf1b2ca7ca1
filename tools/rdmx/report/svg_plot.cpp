// SPDX-License-Identifier: MIT
#include "report/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace rdmx::cli {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// printf into a std::string; every caller passes a literal format.
template <typename... Args>
std::string fmt(const char* format, Args... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, format, args...);
  return std::string(buf, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof buf) - 1)));
}

// Drops trailing zeros so ticks read "2.5" and "10", not "2.500" and "10.000".
std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string format_number(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  const double mag = std::fabs(value);
  if (mag == 0) return "0";
  if (mag >= 1e9 || mag < 1e-4) return fmt("%.*g", digits, value);
  const int int_digits = mag >= 1 ? static_cast<int>(std::floor(std::log10(mag))) + 1 : 0;
  if (int_digits > 0) return trim_zeros(fmt("%.*f", std::max(0, digits - int_digits), value));
  return fmt("%.*g", digits, value);
}

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  while (std::fabs(bytes) >= 1024 && unit + 1 < kUnits.size()) {
    bytes /= 1024;
    ++unit;
  }
  return trim_zeros(fmt("%.1f", bytes)) + " " + kUnits[unit];
}

namespace {

// Tableau-like colours, darkened where needed to read on white; markers cycle
// with a different period so colour + marker pairs stay distinct for 30 lines.
constexpr std::array<const char*, 10> kColours{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                               "#8c564b", "#e377c2", "#17becf", "#6f6f6f", "#a4a520"};
constexpr int kMarkerKinds = 6;

constexpr int kLeft = 84;  // room for y tick labels and the rotated y title
constexpr int kRight = 24;
constexpr int kTop = 40;     // the plot title
constexpr int kBottom = 64;  // x tick labels and the x title
constexpr int kLegendRow = 24;
constexpr double kCharWidth = 7.4;  // average width of a 13 px sans-serif glyph

struct Tick {
  double value;
  std::string label;  // empty: a grid line without a label
};

// Maps data values to pixels along one axis (log or linear).
struct Axis {
  bool log = false;
  double lo = 0;  // in axis units: log10 / log2 of the value when log
  double hi = 1;
  double base = 10;
  double px_lo = 0;  // pixel of lo
  double px_hi = 1;  // pixel of hi

  double unit(double v) const { return log ? std::log(v) / std::log(base) : v; }
  double to_px(double v) const { return px_lo + (unit(v) - lo) / (hi - lo) * (px_hi - px_lo); }
};

std::vector<PlotPoint> drawable(const PlotSeries& s, bool y_log) {
  std::vector<PlotPoint> pts;
  for (const auto& p : s.points) {
    if (std::isfinite(p.x) && std::isfinite(p.y) && p.x > 0 && (!y_log || p.y > 0) && (y_log || p.y >= 0)) {
      pts.push_back(p);
    }
  }
  std::sort(pts.begin(), pts.end(), [](const PlotPoint& a, const PlotPoint& b) { return a.x < b.x; });
  return pts;
}

// Log2 axis over whole powers of two; labels thin out (every 1, 2, 5 or 10
// powers, aligned so 1 KiB and 1 MiB get one) to keep about 60 px apart.
std::vector<Tick> x_ticks(Axis& ax, double xmin, double xmax, bool bytes) {
  int e_lo = static_cast<int>(std::floor(std::log2(xmin)));
  int e_hi = static_cast<int>(std::ceil(std::log2(xmax)));
  if (e_lo == e_hi) {
    e_lo -= 1;
    e_hi += 1;
  }
  ax.log = true;
  ax.base = 2;
  ax.lo = e_lo;
  ax.hi = e_hi;
  const double max_labels = std::max(2.0, std::fabs(ax.px_hi - ax.px_lo) / 60.0);
  int step = 1;
  for (const int s : {1, 2, 5, 10, 20, 40}) {
    step = s;
    if ((e_hi - e_lo) / s <= max_labels) break;
  }
  std::vector<Tick> ticks;
  for (int e = e_lo; e <= e_hi; ++e) {
    const double v = std::ldexp(1.0, e);
    ticks.push_back(
        {v, ((e % step) + step) % step == 0 ? (bytes ? format_bytes(v) : format_number(v)) : std::string()});
  }
  return ticks;
}

// Log10 axis over whole decades; 2 and 5 get labels too when the range is
// short, and unlabelled grid lines at 2..9 otherwise.
std::vector<Tick> y_log_ticks(Axis& ax, double ymin, double ymax) {
  int d_lo = static_cast<int>(std::floor(std::log10(ymin)));
  int d_hi = static_cast<int>(std::ceil(std::log10(ymax)));
  if (d_lo == d_hi) d_hi += 1;
  ax.log = true;
  ax.base = 10;
  ax.lo = d_lo;
  ax.hi = d_hi;
  const bool short_range = d_hi - d_lo <= 2;
  std::vector<Tick> ticks;
  for (int d = d_lo; d <= d_hi; ++d) {
    const double decade = std::pow(10.0, d);
    ticks.push_back({decade, format_number(decade)});
    if (d == d_hi) break;
    for (int m = 2; m <= 9; ++m) {
      const bool labelled = short_range && (m == 2 || m == 5);
      ticks.push_back({m * decade, labelled ? format_number(m * decade) : std::string()});
    }
  }
  return ticks;
}

// Linear axis from 0 with a 1/2/5 step and about five labelled ticks.
std::vector<Tick> y_linear_ticks(Axis& ax, double ymax) {
  if (ymax <= 0) ymax = 1;
  const double raw = ymax / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  ax.log = false;
  ax.lo = 0;
  ax.hi = std::ceil(ymax / step) * step;
  std::vector<Tick> ticks;
  for (double v = 0; v <= ax.hi + step / 2; v += step) ticks.push_back({v, format_number(v)});
  return ticks;
}

std::string marker(int kind, double cx, double cy, const char* colour, bool hollow) {
  const std::string fill = hollow ? std::string(" fill=\"none\" stroke=\"") + colour + "\" stroke-width=\"1.6\""
                                  : std::string(" fill=\"") + colour + "\" stroke=\"#fff\" stroke-width=\"1\"";
  switch (kind % kMarkerKinds) {
    case 0: return fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\"", cx, cy) + fill + "/>";
    case 1: return fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\"", cx - 4, cy - 4) + fill + "/>";
    case 2: return fmt("<path d=\"M%.1f %.1fl5 9h-10z\"", cx, cy - 5.5) + fill + "/>";
    case 3: return fmt("<path d=\"M%.1f %.1fl5.5 5.5l-5.5 5.5l-5.5 -5.5z\"", cx, cy - 5.5) + fill + "/>";
    case 4: return fmt("<path d=\"M%.1f %.1fl5 -9h-10z\"", cx, cy + 5.5) + fill + "/>";
    default: return fmt("<path d=\"M%.1f %.1fh3v3h3v3h-3v3h-3v-3h-3v-3h3z\"", cx - 1.5, cy - 4.5) + fill + "/>";
  }
}

std::string grid_and_ticks(const Axis& xa, const std::vector<Tick>& xt, const Axis& ya, const std::vector<Tick>& yt) {
  std::string out = "<g class=\"grid\">";
  for (const auto& t : xt) {
    const double x = xa.to_px(t.value);
    out += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>", x, ya.px_hi, x, ya.px_lo,
               t.label.empty() ? "#eeeeee" : "#cfcfcf");
    if (!t.label.empty()) {
      out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">", x, ya.px_lo + 20) +
             html_escape(t.label) + "</text>";
    }
  }
  for (const auto& t : yt) {
    const double y = ya.to_px(t.value);
    out += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>", xa.px_lo, y, xa.px_hi, y,
               t.label.empty() ? "#eeeeee" : "#cfcfcf");
    if (!t.label.empty()) {
      out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"13\">", xa.px_lo - 8, y + 4.5) +
             html_escape(t.label) + "</text>";
    }
  }
  out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#555\"/>", xa.px_lo,
             ya.px_hi, xa.px_hi - xa.px_lo, ya.px_lo - ya.px_hi);
  return out + "</g>";
}

std::string axis_titles(const PlotSpec& spec, const Axis& xa, const Axis& ya) {
  std::string out;
  out += fmt("<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", kLeft) + html_escape(spec.title) +
         "</text>";
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">", (xa.px_lo + xa.px_hi) / 2,
             ya.px_lo + 46) +
         html_escape(spec.x_title) + "</text>";
  out += fmt("<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"14\">",
             (ya.px_lo + ya.px_hi) / 2) +
         html_escape(spec.y_title) + "</text>";
  return out;
}

const char* colour_of(const PlotSeries& s, std::size_t i) {
  const std::size_t c = s.colour >= 0 ? static_cast<std::size_t>(s.colour) : i;
  return kColours[c % kColours.size()];
}
int marker_of(const PlotSeries& s, std::size_t i) { return s.marker >= 0 ? s.marker : static_cast<int>(i); }
std::string dash_attribute(const PlotSeries& s) {
  return s.dash.empty() ? std::string() : " stroke-dasharray=\"" + html_escape(s.dash) + "\"";
}

// Callers pass series that all have drawable points (render_svg_plot filters).
std::string series_lines(const PlotSpec& spec, const std::vector<PlotSeries>& series, const Axis& xa, const Axis& ya) {
  std::string out;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto pts = drawable(series[i], spec.y_log);
    const char* colour = colour_of(series[i], i);
    const std::string label = html_escape(series[i].label);
    out += "<g><title>" + label + "</title>";
    std::string path;
    for (const auto& p : pts) path += fmt("%.1f,%.1f ", xa.to_px(p.x), ya.to_px(p.y));
    out += std::string("<polyline fill=\"none\" stroke-width=\"2\" stroke=\"") + colour + "\"" +
           dash_attribute(series[i]) + " points=\"" + path + "\"/>";
    for (const auto& p : pts) {
      out += "<g><title>" + label + ": " + html_escape(spec.x_bytes ? format_bytes(p.x) : format_number(p.x)) +
             " \xe2\x86\x92 " + html_escape(format_number(p.y, 4) + " " + spec.y_unit) + "</title>" +
             marker(marker_of(series[i], i), xa.to_px(p.x), ya.to_px(p.y), colour, series[i].hollow) + "</g>";
    }
    out += "</g>";
  }
  return out;
}

// The legend sits under the plot in as many columns as the longest label
// allows, so a dozen lines still read without covering data.
struct LegendLayout {
  int columns = 1;
  int column_width = 0;
  int rows = 0;
};

LegendLayout legend_layout(const PlotSpec& spec, const std::vector<PlotSeries>& series) {
  std::size_t longest = 1;
  for (const auto& s : series) longest = std::max(longest, s.label.size());
  const int area = spec.width - kLeft - kRight;
  LegendLayout l;
  l.column_width = std::min(area, static_cast<int>(44 + kCharWidth * static_cast<double>(longest)) + 16);
  l.columns = std::max(1, area / l.column_width);
  l.rows =
      static_cast<int>((series.size() + static_cast<std::size_t>(l.columns) - 1) / static_cast<std::size_t>(l.columns));
  return l;
}

std::string legend(const std::vector<PlotSeries>& series, const LegendLayout& l, int top) {
  std::string out = "<g class=\"legend\" font-size=\"13\">";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const int col = static_cast<int>(i) % l.columns;
    const int row = static_cast<int>(i) / l.columns;
    const double x = kLeft + col * l.column_width;
    const double y = top + row * kLegendRow + kLegendRow / 2.0;
    const char* colour = colour_of(series[i], i);
    out += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2\" stroke=\"%s\"", x, y, x + 32,
               y, colour) +
           dash_attribute(series[i]) + "/>";
    out += marker(marker_of(series[i], i), x + 16, y, colour, series[i].hollow);
    out += fmt("<text x=\"%.1f\" y=\"%.1f\">", x + 40, y + 4.5) + html_escape(series[i].label) + "</text>";
  }
  return out + "</g>";
}

}  // namespace

std::string render_svg_plot(const PlotSpec& spec, const std::vector<PlotSeries>& all_series) {
  std::vector<PlotSeries> series;
  for (const auto& s : all_series) {
    if (!drawable(s, spec.y_log).empty()) series.push_back(s);
  }
  double xmin = HUGE_VAL, xmax = -HUGE_VAL, ymin = HUGE_VAL, ymax = -HUGE_VAL;
  for (const auto& s : series) {
    for (const auto& p : drawable(s, spec.y_log)) {
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y);
      ymax = std::max(ymax, p.y);
    }
  }
  if (xmin > xmax) return {};

  Axis xa;
  xa.px_lo = kLeft;
  xa.px_hi = spec.width - kRight;
  Axis ya;
  ya.px_lo = spec.height - kBottom;  // y grows downwards in SVG
  ya.px_hi = kTop;
  const auto xt = x_ticks(xa, xmin, xmax, spec.x_bytes);
  const auto yt = spec.y_log ? y_log_ticks(ya, ymin, ymax) : y_linear_ticks(ya, ymax);

  const LegendLayout l = legend_layout(spec, series);
  const int total_height = spec.height + l.rows * kLegendRow + 8;
  std::string out =
      fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
          "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" fill=\"#222\">",
          spec.width, total_height, spec.width, total_height);
  out += "<title>" + html_escape(spec.title) + "</title>";
  out += fmt("<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>", spec.width, total_height);
  out += grid_and_ticks(xa, xt, ya, yt);
  out += axis_titles(spec, xa, ya);
  out += series_lines(spec, series, xa, ya);
  out += legend(series, l, spec.height);
  return out + "</svg>";
}

}  // namespace rdmx::cli
