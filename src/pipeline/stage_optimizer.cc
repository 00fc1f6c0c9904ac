#include "pipeline/stage_optimizer.h"

#include <algorithm>

#include "common/check.h"
#include "optim/update_rule.h"

namespace gradsync {

StageOptimizer::StageOptimizer(std::vector<std::span<float>> parameters, StageRule rule)
    : parameters_(std::move(parameters)), rule_(rule) {
  for (const std::span<float>& p : parameters_) {
    velocity_.emplace_back(rule_.momentum != 0 ? p.size() : 0, 0.0f);
    current_.emplace_back(p.size());
  }
}

bool StageOptimizer::keepsForwardWeights() const {
  return rule_.weightStash || (rule_.compensation.predict && rule_.compensation.predictBackward);
}

void StageOptimizer::keepCurrent() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::copy(parameters_[i].begin(), parameters_[i].end(), current_[i].begin());
  }
}

void StageOptimizer::restoreCurrent() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::copy(current_[i].begin(), current_[i].end(), parameters_[i].begin());
  }
}

void StageOptimizer::beginForward(int64_t micro, int64_t delay) {
  GS_CHECK(versions_.count(micro) == 0);
  versions_[micro].version = updates_;
  if (!rule_.compensation.predict || rule_.momentum == 0 || delay == 0) return;
  keepCurrent();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    predictWeights(current_[i], velocity_[i], rule_.lr, static_cast<double>(delay), parameters_[i]);
  }
  predicted_ = true;
}

void StageOptimizer::endForward(int64_t micro) {
  Forward& forward = versions_.at(micro);
  if (keepsForwardWeights()) {
    for (const std::span<float>& p : parameters_) forward.weights.emplace_back(p.begin(), p.end());
  }
  if (predicted_) restoreCurrent();
  predicted_ = false;
}

void StageOptimizer::beginBackward(int64_t micro) {
  const Forward& forward = versions_.at(micro);
  if (forward.weights.empty()) return;
  keepCurrent();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::copy(forward.weights[i].begin(), forward.weights[i].end(), parameters_[i].begin());
  }
}

void StageOptimizer::endBackward(int64_t micro) {
  Forward& forward = versions_.at(micro);
  if (forward.weights.empty()) return;
  restoreCurrent();
  forward.weights = {};  // no longer needed: free the stash
}

void StageOptimizer::update(const std::vector<std::span<const float>>& gradients, int64_t micro) {
  GS_CHECK(gradients.size() == parameters_.size());
  auto end = versions_.upper_bound(micro);
  GS_CHECK(end != versions_.begin());  // a forward preceded this update
  lastDelay_ = static_cast<int64_t>(updates_ - std::prev(end)->second.version);
  versions_.erase(versions_.begin(), end);
  UpdateRule rule = UpdateRule::sgd(rule_.lr, rule_.momentum);
  rule.weightDecay = rule_.weightDecay;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    applyDelayedSgd(rule, parameters_[i], gradients[i], velocity_[i],
                    static_cast<double>(lastDelay_), rule_.compensation.spike);
  }
  ++updates_;
}

}  // namespace gradsync
