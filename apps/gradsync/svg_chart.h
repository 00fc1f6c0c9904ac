// A line chart as a standalone SVG file (the plot of `gradsync simulate --sweep`): no plotting
// library needed where the simulator runs. Scaling curves read best on log-log axes (linear
// scaling is then a straight line); ticks are round numbers written as people write them
// (500, 10k, 1M), and tick labels that would overlap are dropped, never drawn over each other.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

struct ChartSeries {
  std::string label;
  std::vector<double> y;  // one value per x
};

struct Chart {
  std::string title;
  std::string xLabel;
  std::string yLabel;
  bool logX = false;
  bool logY = false;
  std::vector<double> x;
  std::vector<ChartSeries> series;
};

// Round tick values covering [lo, hi]: on a log axis the decades (with 2 and 5 between them
// where the range spans fewer than three decades), on a linear one 1-2-5 steps, about 5 ticks.
// REQUIRES: lo <= hi, and lo > 0 on a log axis.
std::vector<double> axisTicks(double lo, double hi, bool log);

// A tick value as people write it: 0.5, 40, 500, 2.5k, 10k, 1M, 3G.
std::string tickLabel(double value);

// The SVG text of `chart`. REQUIRES: at least one x; every series has one value per x; x > 0
// when logX; every y > 0 when logY (a point at y <= 0 is left out of its line).
std::string renderSvg(const Chart& chart);

// A horizontal bar chart (the candidates of `gradsync tune`): one labelled bar per row, top to
// bottom, on a linear x axis from zero; a bar's value is written at its end.
struct BarChart {
  std::string title;
  std::string xLabel;
  std::vector<std::string> labels;
  std::vector<double> values;  // one per label, >= 0
  int decimals = 2;            // of the value written at a bar's end
  std::string valueSuffix;     // after it, e.g. "x"
};

// The SVG text of `chart`. REQUIRES: at least one bar; one value per label, each >= 0.
std::string renderBarSvg(const BarChart& chart);

}  // namespace gradsync
