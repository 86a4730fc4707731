// Line plots as inline SVG for the HTML report: several series on shared axes, "nice" ticks,
// a legend, and vertical markers for events (checkpoints, restarts, stragglers). No scripts.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cadre::obs {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), any order of x is drawn as given
  std::string color;                               // CSS color
  bool dashed = false;
};

struct PlotMarker {
  double x = 0;
  std::string label;
  std::string color = "#888888";
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;
  int width = 920, height = 300;
};

// An <svg> element (with a class "plot" and the title as aria-label). A plot with no points
// says so in place of the lines.
std::string svg_line_plot(const PlotSpec& spec);

// A palette of distinguishable colors: index i -> "#rrggbb".
std::string plot_color(size_t i);

// Escapes text for HTML and SVG (&, <, >, ").
std::string html_escape(const std::string& text);

}  // namespace cadre::obs
