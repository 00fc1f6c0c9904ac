#include "ps/weight_prediction.h"

#include <algorithm>

#include "common/check.h"

namespace gradsync {

WeightPredictor::WeightPredictor(std::vector<size_t> unitElements, double smoothing)
    : units_(unitElements.size()), elements_(std::move(unitElements)), smoothing_(smoothing) {
  GS_CHECK(smoothing >= 0 && smoothing < 1);
}

double WeightPredictor::predict(size_t unit, std::span<const float> pulled, PsStaleness reply,
                                std::span<float> predicted) {
  GS_CHECK(unit < units_.size() && pulled.size() == elements_[unit] &&
           predicted.size() == pulled.size());
  Unit& u = units_[unit];
  const auto staleness = static_cast<double>(reply.staleness);
  if (!u.seen) {
    u.seen = true;
    u.meanStaleness = staleness;
    u.pulled.assign(pulled.begin(), pulled.end());
    u.direction.assign(pulled.size(), 0.0f);
    u.updates = reply.updates;
    std::copy(pulled.begin(), pulled.end(), predicted.begin());
    return 0;
  }
  // A reply carries at least its push's own update since the unit's previous reply.
  GS_CHECK(reply.updates > u.updates);
  u.meanStaleness += kStalenessSmoothing * (staleness - u.meanStaleness);
  const auto keep = static_cast<float>(smoothing_);
  const auto take =
      static_cast<float>((1 - smoothing_) / static_cast<double>(reply.updates - u.updates));
  const auto ahead = static_cast<float>(u.meanStaleness);
  for (size_t i = 0; i < pulled.size(); ++i) {
    u.direction[i] = keep * u.direction[i] + take * (pulled[i] - u.pulled[i]);
    predicted[i] = pulled[i] + ahead * u.direction[i];
    u.pulled[i] = pulled[i];
  }
  u.updates = reply.updates;
  return u.meanStaleness;
}

std::span<const float> WeightPredictor::pulled(size_t unit) const {
  return units_[unit].pulled;
}

}  // namespace gradsync
