// Line charts as inline SVG, for `anvil report`: no script, no font or file from elsewhere, so
// the page renders the same offline in any browser. A chart has a title, a y-axis label and
// series of (step, value) points; the axes get "nice" ticks (1, 2 or 5 times a power of ten)
// spanning the data, with labels, and a legend names the series (unless the title does).
// Series longer than the chart is wide are drawn from each pixel column's first, lowest,
// highest and last point, which keeps every spike visible at a fraction of the size.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anvil {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value), steps increasing
  bool markers = false;                           // also a dot at each point (sparse series)
};

struct Chart {
  std::string title;
  std::string y_label;
  std::vector<ChartSeries> series;
  bool legend = true;  // false when the title names the only series
};

// Returns tick values, 1, 2 or 5 times a power of ten apart, covering [low, high] with about
// `target` intervals; the first tick is <= low and the last >= high.
std::vector<double> nice_ticks(double low, double high, int target);

// Returns an <svg> element drawing the chart.
std::string render_svg_chart(const Chart& chart);

// Returns `text` with &, <, >, " and ' replaced by character references.
std::string html_escape(std::string_view text);

}  // namespace anvil
