// SGD with momentum on raw spans, exactly as torch::optim::SGD computes it (no dampening, no
// Nesterov, no weight decay): v = m·v + g; p = p − lr·v. With m = 0 the velocity is the
// gradient. The engine applies it per unit as the unit's average arrives (p3, sharded), where
// the optimizer cannot run on whole tensors.
#pragma once

#include <cstddef>
#include <span>

#include "common/check.h"

namespace gradsync {

struct SgdOptions {
  double lr = 0;
  double momentum = 0;
};

inline void sgdStep(std::span<float> parameters, std::span<const float> gradients,
                    std::span<float> velocity, SgdOptions options) {
  GS_CHECK(parameters.size() == gradients.size() && velocity.size() == gradients.size());
  const auto lr = static_cast<float>(options.lr);
  const auto momentum = static_cast<float>(options.momentum);
  for (size_t i = 0; i < parameters.size(); ++i) {
    velocity[i] = momentum * velocity[i] + gradients[i];
    parameters[i] -= lr * velocity[i];
  }
}

}  // namespace gradsync
