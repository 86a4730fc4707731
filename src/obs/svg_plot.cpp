// SVG line plots (see svg_plot.h).
#include "obs/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace cadre::obs {

std::string plot_color(size_t i) {
  static const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

namespace {

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them across [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  double span = hi - lo;
  if (!(span > 0)) return {lo};
  double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

std::string number(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) std::snprintf(buf, sizeof buf, "%.2g", v);
  else if (a >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string svg_line_plot(const PlotSpec& spec) {
  const double W = spec.width, H = spec.height;
  const double left = 70, right = 20, top = 34, bottom = 44;
  const double pw = W - left - right, ph = H - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t points = 0;
  for (const auto& s : spec.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      ++points;
    }
  std::string out = str("<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"", spec.width, "\" height=\"",
                        spec.height, "\" viewBox=\"0 0 ", spec.width, " ", spec.height, "\" role=\"img\" aria-label=\"",
                        html_escape(spec.title), "\">\n");
  out += str("<rect x=\"0\" y=\"0\" width=\"", W, "\" height=\"", H, "\" fill=\"#ffffff\"/>\n");
  out += str("<text x=\"", left, "\" y=\"20\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">",
             html_escape(spec.title), "</text>\n");
  if (points == 0) {
    out += str("<text x=\"", left + pw / 2, "\" y=\"", top + ph / 2, "\" text-anchor=\"middle\" fill=\"#888\">",
               "no data</text>\n</svg>\n");
    return out;
  }
  for (const auto& m : spec.markers) x0 = std::min(x0, m.x), x1 = std::max(x1, m.x);
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-9, std::fabs(y0) * 0.1), y1 += std::max(1e-9, std::fabs(y1) * 0.1);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto X = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };
  // Grid, ticks and axis labels.
  for (double t : nice_ticks(y0, y1, 5)) {
    out += str("<line x1=\"", left, "\" x2=\"", left + pw, "\" y1=\"", coord(Y(t)), "\" y2=\"", coord(Y(t)),
               "\" stroke=\"#e6e6e6\"/>\n");
    out += str("<text x=\"", left - 6, "\" y=\"", coord(Y(t) + 4), "\" text-anchor=\"end\" font-size=\"11\" fill=\"#444\">",
               number(t), "</text>\n");
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    out += str("<line x1=\"", coord(X(t)), "\" x2=\"", coord(X(t)), "\" y1=\"", top, "\" y2=\"", top + ph,
               "\" stroke=\"#f0f0f0\"/>\n");
    out += str("<text x=\"", coord(X(t)), "\" y=\"", top + ph + 16, "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#444\">",
               number(t), "</text>\n");
  }
  out += str("<rect x=\"", left, "\" y=\"", top, "\" width=\"", pw, "\" height=\"", ph,
             "\" fill=\"none\" stroke=\"#999\"/>\n");
  out += str("<text x=\"", left + pw / 2, "\" y=\"", H - 6, "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#333\">",
             html_escape(spec.x_label), "</text>\n");
  out += str("<text transform=\"translate(14,", top + ph / 2, ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\" "
             "fill=\"#333\">", html_escape(spec.y_label), "</text>\n");
  // Event markers, then the series on top.
  for (const auto& m : spec.markers) {
    out += str("<line class=\"marker\" x1=\"", coord(X(m.x)), "\" x2=\"", coord(X(m.x)), "\" y1=\"", top, "\" y2=\"",
               top + ph, "\" stroke=\"", m.color, "\" stroke-dasharray=\"3,3\"><title>", html_escape(m.label),
               "</title></line>\n");
  }
  for (const auto& s : spec.series) {
    std::string path;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      path += str(path.empty() ? "" : " ", coord(X(x)), ",", coord(Y(y)));
    }
    if (path.empty()) continue;
    out += str("<polyline class=\"series\" fill=\"none\" stroke=\"", s.color, "\" stroke-width=\"1.8\"",
               s.dashed ? " stroke-dasharray=\"6,4\"" : "", " points=\"", path, "\"><title>", html_escape(s.name),
               "</title></polyline>\n");
    if (s.points.size() == 1)
      out += str("<circle cx=\"", coord(X(s.points[0].first)), "\" cy=\"", coord(Y(s.points[0].second)),
                 "\" r=\"3\" fill=\"", s.color, "\"/>\n");
  }
  // Legend, top right inside the plot.
  double ly = top + 14;
  for (const auto& s : spec.series) {
    if (s.points.empty()) continue;
    double lx = left + pw - 190;
    out += str("<line x1=\"", lx, "\" x2=\"", lx + 22, "\" y1=\"", coord(ly - 4), "\" y2=\"", coord(ly - 4),
               "\" stroke=\"", s.color, "\" stroke-width=\"2.5\"", s.dashed ? " stroke-dasharray=\"6,4\"" : "", "/>\n");
    out += str("<text x=\"", lx + 28, "\" y=\"", coord(ly), "\" font-size=\"11\" fill=\"#222\">", html_escape(s.name),
               "</text>\n");
    ly += 15;
  }
  return out + "</svg>\n";
}

}  // namespace cadre::obs
