#include "svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace gradsync {
namespace {

constexpr double kWidth = 720, kHeight = 440, kLeft = 80, kRight = 180, kTop = 40, kBottom = 60;
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

}  // namespace

std::string renderSvg(const Chart& chart) {
  GS_CHECK(!chart.x.empty());
  auto fx = [&](double x) { return chart.logX ? std::log10(x) : x; };
  const auto [xMinIt, xMaxIt] = std::minmax_element(chart.x.begin(), chart.x.end());
  const double x0 = fx(*xMinIt), x1 = std::max(fx(*xMaxIt), x0 + 1e-9);
  double yMax = 0;
  for (const ChartSeries& s : chart.series)
    for (double y : s.y) yMax = std::max(yMax, y);
  yMax = yMax > 0 ? yMax * 1.1 : 1;
  const double plotW = kWidth - kLeft - kRight, plotH = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (fx(x) - x0) / (x1 - x0) * plotW; };
  auto py = [&](double y) { return kTop + plotH - y / yMax * plotH; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n",
      kWidth, kHeight, kLeft, escape(chart.title));
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      kLeft, kTop, plotW, plotH);
  for (int i = 0; i <= 4; ++i) {  // y grid
    const double y = yMax * i / 4;
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n",
        kLeft, kLeft + plotW, py(y), py(y), kLeft - 6, py(y) + 4, y);
  }
  for (double x : chart.x)
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", px(x),
                       kTop + plotH + 16, x);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     kLeft + plotW / 2, kHeight - 16, escape(chart.xLabel));
  svg += fmt::format(
      "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">"
      "{}</text>\n",
      kTop + plotH / 2, escape(chart.yLabel));
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const char* color = kColors[s % std::size(kColors)];
    std::string points;
    for (size_t i = 0; i < chart.x.size() && i < chart.series[s].y.size(); ++i)
      points += fmt::format("{:.1f},{:.1f} ", px(chart.x[i]), py(chart.series[s].y[i]));
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       points, color);
    const double ly = kTop + 16 + 18.0 * s;
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" "
        "stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
        kWidth - kRight + 10, kWidth - kRight + 30, ly, ly, color, kWidth - kRight + 36, ly + 4,
        escape(chart.series[s].label));
  }
  return svg + "</svg>\n";
}

}  // namespace gradsync
