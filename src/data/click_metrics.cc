#include "data/click_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/check.h"

namespace gradsync {

double rocAuc(std::span<const float> scores, std::span<const float> labels) {
  GS_CHECK_EQ(scores.size(), labels.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positives = 0, rankSum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double meanRank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // 1-based
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        rankSum += meanRank;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rankSum - positives * (positives + 1) / 2) / (positives * negatives);
}

double logLoss(std::span<const float> probabilities, std::span<const float> labels) {
  GS_CHECK_EQ(probabilities.size(), labels.size());
  if (probabilities.empty()) return 0;
  constexpr double kClip = 1e-7;
  double total = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probabilities[i]), kClip, 1 - kClip);
    total -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return total / static_cast<double>(probabilities.size());
}

}  // namespace gradsync
