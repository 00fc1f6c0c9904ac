#include "optim/delay_compensation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

DelayCompensation DelayCompensation::parse(std::string_view spec) {
  if (spec == "none") return {};
  if (spec == "sc") return {.spike = true};
  if (spec == "lwp") return {.predict = true};
  if (spec == "sc+lwp" || spec == "lwp+sc") return {.spike = true, .predict = true};
  throw ConfigError(fmt::format("unknown delay compensation '{}'", spec),
                    {.hint = "choose one of none, sc, lwp, sc+lwp"});
}

std::string DelayCompensation::describe() const {
  if (spike && predict) return "sc+lwp";
  if (spike) return "sc";
  if (predict) return "lwp";
  return "none";
}

SpikeWeights spikeWeights(double momentum, double delay) {
  GS_CHECK(momentum >= 0 && momentum < 1 && delay >= 0);
  const double decayed = std::pow(momentum, delay);  // pow(0, 0) is 1: D = 0 is plain SGD
  return {.velocity = decayed, .gradient = (1 - decayed) / (1 - momentum)};
}

void applyDelayedSgd(const UpdateRule& rule, std::span<float> parameters,
                     std::span<const float> gradients, std::span<float> velocity, double delay,
                     bool spike) {
  if (rule.kind != UpdateRule::Kind::kSgd || rule.nesterov || rule.dampening != 0) {
    throw ConfigError(
        fmt::format("delay compensation needs SGD with plain momentum, not {}", rule.describe()));
  }
  GS_CHECK(parameters.size() == gradients.size());
  const bool momentum = rule.momentum != 0;
  GS_CHECK(!momentum || velocity.size() == parameters.size());
  const auto lr = static_cast<float>(rule.lr);
  const auto m = static_cast<float>(rule.momentum);
  const auto decay = static_cast<float>(rule.weightDecay);
  const SpikeWeights w = spike ? spikeWeights(rule.momentum, delay) : SpikeWeights{};
  const auto onVelocity = static_cast<float>(w.velocity);
  const auto onGradient = static_cast<float>(w.gradient);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const float g = decay != 0 ? gradients[i] + decay * parameters[i] : gradients[i];
    if (!momentum) {
      parameters[i] -= lr * g;
      continue;
    }
    velocity[i] = m * velocity[i] + g;
    parameters[i] -= spike ? lr * (onVelocity * velocity[i] + onGradient * g) : lr * velocity[i];
  }
}

void predictWeights(std::span<const float> parameters, std::span<const float> velocity, double lr,
                    double delay, std::span<float> predicted) {
  GS_CHECK(predicted.size() == parameters.size());
  if (velocity.empty()) {
    std::copy(parameters.begin(), parameters.end(), predicted.begin());
    return;
  }
  GS_CHECK(velocity.size() == parameters.size());
  const auto ahead = static_cast<float>(lr * delay);
  for (size_t i = 0; i < parameters.size(); ++i) {
    predicted[i] = parameters[i] - ahead * velocity[i];
  }
}

SgdRecipe scaleRecipe(const SgdRecipe& reference, size_t batch) {
  if (reference.batch == 0 || batch == 0) {
    throw ConfigError("batch sizes for the hyperparameter scaling must be positive");
  }
  if (reference.momentum < 0 || reference.momentum >= 1) {
    throw ConfigError(
        fmt::format("momentum {} cannot be rescaled: it must be in [0, 1)", reference.momentum));
  }
  const double ratio = static_cast<double>(batch) / static_cast<double>(reference.batch);
  const double momentum = std::pow(reference.momentum, ratio);
  // m0 = 0 gives m = 0 and the linear rule η0·B/B0.
  const double lr = reference.lr * ratio * (1 - momentum) / (1 - reference.momentum);
  return {.batch = batch, .lr = lr, .momentum = momentum};
}

}  // namespace gradsync
