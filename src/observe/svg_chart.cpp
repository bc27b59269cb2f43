// SVG drawing for svg_chart.h. Coordinates are written with one decimal (a tenth of a pixel),
// so a chart's text is small and the same inputs give the same bytes.
#include "observe/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

namespace anvil {
namespace {

constexpr double kWidth = 600, kHeight = 320;
constexpr double kLeft = 74, kRight = 16, kTop = 34, kBottom = 46;  // margins around the plot
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;
constexpr int kXTicks = 6, kYTicks = 5;
// Points per pixel column above which a series is thinned (see the header).
constexpr size_t kPointsPerColumn = 4;
constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
};

// Returns `range` widened when it is a single value, so it still has an extent to divide.
Range widened(Range range) {
  if (range.high > range.low) return range;
  const double pad = range.low != 0 ? std::fabs(range.low) * 0.1 : 1.0;
  return {range.low - pad, range.high + pad};
}

std::vector<double> ticks_for(Range range, int target, bool integers) {
  range = widened(range);
  std::vector<double> ticks = nice_ticks(range.low, range.high, target);
  if (integers && ticks.size() > 1 && ticks[1] - ticks[0] < 1) {
    ticks.clear();
    for (double t = std::floor(range.low); t <= std::ceil(range.high); ++t) ticks.push_back(t);
  }
  return ticks;
}

// Returns the indices of the points to draw: all of them, or per pixel column the first,
// lowest, highest and last.
std::vector<size_t> thinned(const std::vector<std::pair<double, double>>& points, double x_low,
                            double x_high) {
  std::vector<size_t> keep;
  if (points.size() <= kPointsPerColumn * static_cast<size_t>(kPlotWidth)) {
    for (size_t i = 0; i < points.size(); ++i) keep.push_back(i);
    return keep;
  }
  struct Column {
    size_t first, low, high, last;
  };
  std::map<int64_t, Column> columns;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto column =
        static_cast<int64_t>((points[i].first - x_low) / (x_high - x_low) * kPlotWidth);
    auto [it, fresh] = columns.try_emplace(column, Column{i, i, i, i});
    if (fresh) continue;
    Column& c = it->second;
    if (points[i].second < points[c.low].second) c.low = i;
    if (points[i].second > points[c.high].second) c.high = i;
    c.last = i;
  }
  for (const auto& [column, c] : columns) {
    std::array<size_t, 4> picks = {c.first, c.low, c.high, c.last};
    std::sort(picks.begin(), picks.end());
    for (size_t i = 0; i < picks.size(); ++i) {
      if (i == 0 || picks[i] != picks[i - 1]) keep.push_back(picks[i]);
    }
  }
  return keep;
}

std::string tick_label(double value) {
  return fmt::format("{:g}", std::fabs(value) < 1e-12 ? 0.0 : value);
}

}  // namespace

std::vector<double> nice_ticks(double low, double high, int target) {
  const double raw = (high - low) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  const double step =
      magnitude * (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10);
  // A tick within a millionth of a step of the data counts as covering it.
  const auto first = static_cast<int64_t>(std::floor(low / step + 1e-6));
  const auto last = static_cast<int64_t>(std::ceil(high / step - 1e-6));
  std::vector<double> ticks;
  for (int64_t k = first; k <= last; ++k) ticks.push_back(static_cast<double>(k) * step);
  return ticks;
}

std::string html_escape(std::string_view text) {
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

std::string render_svg_chart(const Chart& chart) {
  Range x_range, y_range;
  for (const ChartSeries& series : chart.series) {
    for (const auto& [x, y] : series.points) {
      x_range = {std::min(x_range.low, x), std::max(x_range.high, x)};
      y_range = {std::min(y_range.low, y), std::max(y_range.high, y)};
    }
  }
  std::string svg = fmt::format(
      "<svg viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
      "height=\"{1}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n"
      "<title>{2}</title>\n<text x=\"{3}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{2}"
      "</text>\n",
      kWidth, kHeight, html_escape(chart.title), kLeft);
  if (x_range.low > x_range.high) {
    return svg + fmt::format("<text x=\"{}\" y=\"{}\">no values</text>\n</svg>\n", kLeft,
                             kTop + kPlotHeight / 2);
  }
  const std::vector<double> x_ticks = ticks_for(x_range, kXTicks, /*integers=*/true);
  const std::vector<double> y_ticks = ticks_for(y_range, kYTicks, /*integers=*/false);
  const double x0 = x_ticks.front(), x1 = x_ticks.back();
  const double y0 = y_ticks.front(), y1 = y_ticks.back();
  const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotWidth; };
  const auto py = [&](double y) { return kTop + kPlotHeight - (y - y0) / (y1 - y0) * kPlotHeight; };

  for (const double t : y_ticks) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, kLeft + kPlotWidth, py(t), kLeft - 6, py(t) + 4, tick_label(t));
  }
  for (const double t : x_ticks) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(t), kTop, kTop + kPlotHeight + 5, kTop + kPlotHeight + 18, tick_label(t));
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#555\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      kLeft, kTop, kPlotWidth, kPlotHeight, kLeft + kPlotWidth / 2, kHeight - 8,
      kTop + kPlotHeight / 2, html_escape(chart.y_label));

  for (size_t s = 0; s < chart.series.size(); ++s) {
    const ChartSeries& series = chart.series[s];
    const char* color = kColors[s % kColors.size()];
    std::string points;
    for (const size_t i : thinned(series.points, x0, x1)) {
      points += fmt::format("{}{:.1f},{:.1f}", points.empty() ? "" : " ",
                            px(series.points[i].first), py(series.points[i].second));
    }
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color,
        points);
    if (series.markers) {
      for (const auto& [x, y] : series.points) {
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x),
                           py(y), color);
      }
    }
  }
  // The legend sits in the plot's top right corner, over a pale box drawn above the lines.
  if (!chart.legend) return svg + "</svg>\n";
  const double legend_x = kLeft + kPlotWidth - 160;
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"156\" height=\"{}\" fill=\"#fff\" "
      "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
      legend_x - 4, kTop + 4, 16 * chart.series.size() + 4);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const double legend_y = kTop + 18 + 16 * static_cast<double>(s);
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"3\"/><text x=\"{4}\" y=\"{5:.1f}\">{6}</text>\n",
        legend_x, legend_x + 18, legend_y - 4, kColors[s % kColors.size()], legend_x + 24,
        legend_y, html_escape(chart.series[s].name));
  }
  return svg + "</svg>\n";
}

}  // namespace anvil
