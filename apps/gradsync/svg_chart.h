// A line chart as a standalone SVG file (the plot of `gradsync simulate --sweep`): no plotting
// library needed where the simulator runs.
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
  std::vector<double> x;
  std::vector<ChartSeries> series;
};

// The SVG text of `chart`. REQUIRES: at least one x; every series has one value per x; x > 0
// when logX.
std::string renderSvg(const Chart& chart);

}  // namespace gradsync
