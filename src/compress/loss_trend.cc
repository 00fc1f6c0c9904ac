#include "compress/loss_trend.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"

namespace gradsync {

LossTrend::LossTrend(int64_t warmupSteps, int64_t windowSteps)
    : warmup_(static_cast<uint64_t>(std::max<int64_t>(warmupSteps, 0))),
      referenceBegin_(static_cast<uint64_t>(std::max<int64_t>(warmupSteps - windowSteps, 0))) {
  GS_CHECK(windowSteps >= 1);
}

void LossTrend::observe(uint64_t step, double loss) {
  if (step >= warmup_) {
    windowSum_ += loss;
    windowCount_ += 1;
  } else if (step >= referenceBegin_) {
    referenceSum_ += loss;
    referenceCount_ += 1;
  }
}

LossTrend::Contribution LossTrend::takeWindow() {
  Contribution mine{windowSum_, windowCount_, referenceSum_, referenceCount_};
  windowSum_ = 0;
  windowCount_ = 0;
  return mine;
}

double LossTrend::ratio(std::span<const Contribution> ranks) {
  double window = 0, windowCount = 0, reference = 0, referenceCount = 0;
  for (const Contribution& c : ranks) {  // in rank order: the same sum on every rank
    window += c[0];
    windowCount += c[1];
    reference += c[2];
    referenceCount += c[3];
  }
  if (windowCount == 0 || referenceCount == 0) return -1;
  const double windowMean = window / windowCount;
  const double referenceMean = reference / referenceCount;
  if (std::isnan(windowMean) || std::isnan(referenceMean)) return std::nan("");
  // A ratio only means something for a positive loss (cross-entropy's is).
  return referenceMean > 0 ? windowMean / referenceMean : -1;
}

void LossTrend::saveState(StateWriter& out) const {
  out.write(std::vector<double>{referenceSum_, referenceCount_, windowSum_, windowCount_});
}

void LossTrend::loadState(StateReader& in) {
  std::vector<double> values(4);
  in.readExact(values);
  referenceSum_ = values[0];
  referenceCount_ = values[1];
  windowSum_ = values[2];
  windowCount_ = values[3];
}

}  // namespace gradsync
