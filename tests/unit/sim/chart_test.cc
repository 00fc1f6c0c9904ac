// The simulator's charts: round ticks written as people write them, log-log scaling plots,
// and tick labels that never overlap.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "svg_chart.h"

namespace gradsync {
namespace {

TEST(Chart, TickLabelsReadAsPeopleWriteThem) {
  EXPECT_EQ(tickLabel(0), "0");
  EXPECT_EQ(tickLabel(-0.0), "0");  // a linear axis from 0 may compute it
  EXPECT_EQ(tickLabel(0.5), "0.5");
  EXPECT_EQ(tickLabel(40), "40");
  EXPECT_EQ(tickLabel(4096), "4096");
  EXPECT_EQ(tickLabel(2500.5), "2.5k");
  EXPECT_EQ(tickLabel(10000), "10k");
  EXPECT_EQ(tickLabel(676000), "676k");
  EXPECT_EQ(tickLabel(1e6), "1M");
  EXPECT_EQ(tickLabel(3e9), "3G");
  EXPECT_EQ(tickLabel(-2e6), "-2M");
}

TEST(Chart, LogTicksAreDecadesWithTwoAndFiveOnShortRanges) {
  EXPECT_EQ(axisTicks(800, 3e6, true), (std::vector<double>{1e3, 1e4, 1e5, 1e6}));
  EXPECT_EQ(axisTicks(15, 600, true), (std::vector<double>{20, 50, 100, 200, 500}));
  EXPECT_LE(axisTicks(1, 1e18, true).size(), 7u);  // eighteen decades: a few, never a crowd
}

TEST(Chart, LinearTicksStepByOneTwoOrFive) {
  std::vector<double> ticks = axisTicks(0, 1.1, false);
  ASSERT_EQ(ticks.size(), 6u);
  for (size_t i = 0; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i], 0.2 * i, 1e-12);
  EXPECT_EQ(axisTicks(0, 7.4e5, false).size(), 8u);  // 0, 100k, ..., 700k
  EXPECT_EQ(axisTicks(0, 9e5, false), (std::vector<double>{0, 2e5, 4e5, 6e5, 8e5}));
  EXPECT_EQ(axisTicks(3, 3, false), (std::vector<double>{3}));
}

struct Label {
  double x, y;
  std::string text;
};

std::vector<Label> centredLabels(const std::string& svg) {
  std::vector<Label> out;
  std::regex text("<text x=\"([0-9.]+)\" y=\"([0-9.]+)\" text-anchor=\"middle\">([^<]*)<");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator();
       ++it)
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2]), (*it)[3]});
  return out;
}

std::vector<std::pair<double, double>> firstLine(const std::string& svg) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(svg, match, std::regex("points=\"([^\"]+)\"")));
  std::vector<std::pair<double, double>> points;
  std::istringstream in(match[1]);
  double x, y;
  char comma;
  while (in >> x >> comma >> y) points.emplace_back(x, y);
  return points;
}

TEST(Chart, AScalingSweepIsLogLogWithRoundTicksThatDoNotOverlap) {
  Chart chart{"t", "workers", "samples/s", true, true, {}, {{"linear", {}}}};
  for (double w = 1; w <= 4096; w *= 2) {
    chart.x.push_back(w);
    chart.series[0].y.push_back(2600 * w);
  }
  std::string svg = renderSvg(chart);
  EXPECT_EQ(svg.find("e+"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">1M<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">10k<"), std::string::npos) << svg;
  // Log-log: linear scaling is a straight line (equal steps in both directions).
  auto points = firstLine(svg);
  ASSERT_EQ(points.size(), 13u);
  for (size_t i = 2; i < points.size(); ++i) {
    EXPECT_NEAR(points[i].first - points[i - 1].first, points[1].first - points[0].first, 0.15);
    EXPECT_NEAR(points[i].second - points[i - 1].second, points[1].second - points[0].second, 0.15);
  }
  // The 13 sweep points are far enough apart (a doubling each) to be labelled each.
  EXPECT_EQ(centredLabels(svg).size(), 13u + 1);
}

TEST(Chart, TickLabelsThatWouldOverlapAreDropped) {
  Chart chart{"t", "workers", "samples/s", true, true, {}, {{"a", {}}}};
  for (double w = 1; w <= 16; ++w) {  // 15 and 16 are 11 pixels apart on a log axis
    chart.x.push_back(w);
    chart.series[0].y.push_back(w);
  }
  std::vector<Label> ticks;
  for (const Label& l : centredLabels(renderSvg(chart)))
    if (l.text != "workers") ticks.push_back(l);
  ASSERT_GE(ticks.size(), 5u);
  EXPECT_LT(ticks.size(), 16u);
  EXPECT_EQ(ticks.front().text, "1");
  for (size_t i = 1; i < ticks.size(); ++i) {
    const double halfWidths =
        3.5 * static_cast<double>(ticks[i].text.size() + ticks[i - 1].text.size());
    EXPECT_GT(ticks[i].x - ticks[i - 1].x, halfWidths) << ticks[i - 1].text << " " << ticks[i].text;
  }
}

TEST(Chart, OnePointAndZerosOnALogAxisStillDraw) {
  Chart chart{"t", "x", "y", true, true, {8}, {{"a", {0}}, {"b", {5}}}};
  std::string svg = renderSvg(chart);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
}

// tune's chart: one bar per label, widths proportional to the values from a zero axis, every
// label and value written, no "-0" tick.
TEST(Chart, BarsAreProportionalAndLabelled) {
  BarChart chart{"t", "x", {"p3 · topk", "wfbp <none>"}, {1.0, 2.5}, 2, "x"};
  const std::string svg = renderBarSvg(chart);
  std::vector<double> widths;
  for (size_t at = svg.find("<rect x="); at != std::string::npos;
       at = svg.find("<rect x=", at + 1)) {
    const size_t w = svg.find("width=\"", at) + 7;
    widths.push_back(std::stod(svg.substr(w)));
  }
  ASSERT_EQ(widths.size(), 2u);
  EXPECT_NEAR(widths[1] / widths[0], 2.5, 0.01);
  EXPECT_NE(svg.find("p3 · topk"), std::string::npos);
  EXPECT_NE(svg.find("wfbp &lt;none&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">2.50x<"), std::string::npos);
  EXPECT_EQ(svg.find("-0"), std::string::npos);
}

}  // namespace
}  // namespace gradsync
