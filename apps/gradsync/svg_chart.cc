#include "svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace gradsync {
namespace {

constexpr double kWidth = 760, kHeight = 440, kRight = 180, kTop = 40, kBottom = 60;
constexpr double kCharWidth = 7;    // font-size 12 sans-serif, generous, so estimates never overlap
constexpr double kLineHeight = 14;  // the least vertical distance between two y tick labels
constexpr double kGap = 6;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

double labelWidth(const std::string& label) {
  return kCharWidth * static_cast<double>(label.size());
}

// A data range mapped to pixels, linear or logarithmic.
struct Axis {
  double lo, hi;
  bool log;
  double from, to;  // pixels of lo and hi

  double f(double v) const { return log ? std::log10(v) : v; }
  double pixel(double v) const { return from + (f(v) - f(lo)) / (f(hi) - f(lo)) * (to - from); }
};

// The range an axis shows for values in [lo, hi]: a log axis pads by a fifth either way; a
// linear one starts at zero and leaves a tenth on top; an empty range is widened.
std::pair<double, double> paddedRange(double lo, double hi, bool log) {
  if (log) return {lo / 1.2, (hi > lo ? hi : lo * 10) * 1.2};
  if (hi <= 0) return {0, 1};
  return {std::min(lo, 0.0), hi * 1.1};
}

std::pair<double, double> rangeOf(const Chart& chart, bool log) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (const ChartSeries& s : chart.series)
    for (double y : s.y)
      if (!log || y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
  if (lo > hi) return paddedRange(1, 1, log);  // nothing to draw
  return paddedRange(lo, hi, log);
}

// The labels that fit: scanning along the axis, one is kept when it starts past the end of
// the last kept one.
template <typename Extent>
std::vector<double> withoutOverlaps(const std::vector<double>& ticks, Extent extent) {
  std::vector<double> kept;
  double end = -HUGE_VAL;
  for (double t : ticks) {
    auto [start, stop] = extent(t);
    if (start < end + kGap) continue;
    kept.push_back(t);
    end = stop;
  }
  return kept;
}

std::string polyline(const Axis& x, const Axis& y, const Chart& chart, const ChartSeries& series,
                     const char* color) {
  std::string points;
  for (size_t i = 0; i < chart.x.size() && i < series.y.size(); ++i) {
    if (y.log && series.y[i] <= 0) continue;
    points += fmt::format("{:.1f},{:.1f} ", x.pixel(chart.x[i]), y.pixel(series.y[i]));
  }
  return fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     points, color);
}

std::string yAxis(const Axis& y, const std::vector<double>& ticks, double left, double right) {
  std::string svg;
  for (double t : ticks)
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        left, right, y.pixel(t), y.pixel(t), left - kGap, y.pixel(t) + 4, tickLabel(t));
  return svg;
}

std::string xAxis(const Axis& x, const std::vector<double>& ticks, double bottom) {
  std::string svg;
  for (double t : ticks)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"black\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x.pixel(t), bottom, bottom + 4, bottom + 17, tickLabel(t));
  return svg;
}

// The x ticks: the data's own x values when they are few (a sweep's 8, 64, 4096 workers),
// round values otherwise.
std::vector<double> xTickValues(const Chart& chart, const Axis& x) {
  std::vector<double> values = chart.x;
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values.size() <= 16 ? values : axisTicks(x.lo, x.hi, x.log);
}

// The document's opening: its size, a white background and the title at (titleX, 22).
std::string svgOpening(double width, double height, double titleX, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n",
      width, height, titleX, escape(title));
}

}  // namespace

std::vector<double> axisTicks(double lo, double hi, bool log) {
  GS_CHECK(lo <= hi && (!log || lo > 0));
  std::vector<double> ticks;
  const double slack = 1e-9 * std::max(std::fabs(lo), std::fabs(hi));
  if (log) {
    const int first = static_cast<int>(std::floor(std::log10(lo)));
    const int last = static_cast<int>(std::ceil(std::log10(hi)));
    const int stride = std::max(1, (last - first + 5) / 6);  // at most about 6 decades labelled
    const std::vector<double> steps =
        last - first < 3 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
    for (int d = first; d <= last; d += stride)
      for (double m : steps) {
        const double v = m * std::pow(10.0, d);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    return ticks;
  }
  const double raw = (hi - lo) / 7.5;  // 5 to 8 ticks
  if (raw <= 0) return {lo};
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw - slack) {
      step = m * magnitude;
      break;
    }
  for (double k = std::ceil((lo - slack) / step); k * step <= hi + slack; ++k)
    ticks.push_back(k * step);
  return ticks;
}

std::string tickLabel(double value) {
  const double magnitude = std::fabs(value);
  // Whole numbers below 10,000 as they are (4096 workers reads better than 4.1k); a tick at
  // -0.0 (a linear axis from 0) reads 0.
  if (magnitude < 1e4 && value == std::round(value)) return fmt::format("{:.0f}", value + 0.0);
  if (magnitude < 1e3) return fmt::format("{:.3g}", value);
  const std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [scale, suffix] : units)
    if (magnitude >= scale) return fmt::format("{:.3g}{}", value / scale, suffix);
  return fmt::format("{:.3g}", value);
}

std::string renderSvg(const Chart& chart) {
  GS_CHECK(!chart.x.empty());
  const auto [xMin, xMax] = std::minmax_element(chart.x.begin(), chart.x.end());
  GS_CHECK(!chart.logX || *xMin > 0);
  const auto [yLo, yHi] = rangeOf(chart, chart.logY);
  std::vector<double> yTicks = axisTicks(yLo, yHi, chart.logY);
  double tickWidth = 0;
  for (double t : yTicks) tickWidth = std::max(tickWidth, labelWidth(tickLabel(t)));
  // The y label's line, then the tick labels, then the plot: nothing drawn over anything.
  const double left = 16 + kLineHeight + tickWidth + kGap;
  const double right = kWidth - kRight, bottom = kHeight - kBottom;
  double x0 = *xMin, x1 = *xMax;
  if (x1 == x0) {  // one point: centred
    x0 = chart.logX ? x0 / 2 : x0 - 0.5;
    x1 = chart.logX ? x1 * 2 : x1 + 0.5;
  }
  const Axis x{x0, x1, chart.logX, left + 12, right - 12};
  const Axis y{yLo, yHi, chart.logY, bottom, kTop};
  yTicks = withoutOverlaps(yTicks, [&](double t) {
    return std::pair{bottom - y.pixel(t), bottom - y.pixel(t) + kLineHeight};
  });
  const std::vector<double> xTicks = withoutOverlaps(xTickValues(chart, x), [&](double t) {
    const double half = labelWidth(tickLabel(t)) / 2;
    return std::pair{x.pixel(t) - half, x.pixel(t) + half};
  });
  std::string svg = svgOpening(kWidth, kHeight, left, chart.title);
  svg += yAxis(y, yTicks, left, right) + xAxis(x, xTicks, bottom);
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      left, kTop, right - left, bottom - kTop);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     (left + right) / 2, kHeight - 16, escape(chart.xLabel));
  svg += fmt::format(
      "<text transform=\"translate(20,{}) rotate(-90)\" text-anchor=\"middle\">"
      "{}</text>\n",
      (kTop + bottom) / 2, escape(chart.yLabel));
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const char* color = kColors[s % std::size(kColors)];
    svg += polyline(x, y, chart, chart.series[s], color);
    const double ly = kTop + 16 + 18.0 * static_cast<double>(s);
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" "
        "stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
        right + 10, right + 30, ly, ly, color, right + 36, ly + 4, escape(chart.series[s].label));
  }
  return svg + "</svg>\n";
}

std::string renderBarSvg(const BarChart& chart) {
  GS_CHECK(!chart.values.empty() && chart.values.size() == chart.labels.size());
  constexpr double kBar = 18, kPitch = 24;
  double labelsWidth = 0;
  for (const std::string& label : chart.labels)
    labelsWidth = std::max(labelsWidth, labelWidth(label));
  const double left = 16 + labelsWidth + kGap, right = kWidth - 60;
  const double bottom = kTop + kPitch * static_cast<double>(chart.values.size()) + kGap;
  const double height = bottom + kBottom;
  const double hi = *std::max_element(chart.values.begin(), chart.values.end());
  const auto [lo, top] = paddedRange(0, hi, false);
  const Axis x{lo, top, false, left, right};
  const std::vector<double> ticks = withoutOverlaps(axisTicks(lo, top, false), [&](double t) {
    const double half = labelWidth(tickLabel(t)) / 2;
    return std::pair{x.pixel(t) - half, x.pixel(t) + half};
  });
  std::string svg = svgOpening(kWidth, height, 16, chart.title);
  for (double t : ticks)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x.pixel(t), kTop, bottom, bottom + 17, tickLabel(t == 0 ? 0.0 : t));  // never "-0"
  for (size_t i = 0; i < chart.values.size(); ++i) {
    const double y = kTop + kGap + kPitch * static_cast<double>(i);
    const double end = x.pixel(chart.values[i]);
    svg += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>"
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        left - kGap, y + kBar - 5, escape(chart.labels[i]), left, y, end - left, kBar, kColors[0],
        end + 4, y + kBar - 5,
        fmt::format("{:.{}f}{}", chart.values[i], chart.decimals, chart.valueSuffix));
  }
  svg += fmt::format(
      "<line x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"black\"/>"
      "<line x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">{6}</text>\n",
      left, kTop, bottom, right, (left + right) / 2, height - 16, escape(chart.xLabel));
  return svg + "</svg>\n";
}

}  // namespace gradsync
