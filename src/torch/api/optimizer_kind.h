// Which of torch's optimizers gradsync knows an optimizer to be, by its type: SGD (and its
// subclasses, FusedSGD), Adam, AdamW (in LibTorch 1.13 an unrelated type, not a subclass of
// Adam), or another (sign descent, RMSprop...). Each caller decides what it does with the kind;
// this is the one place that asks the type. Torch headers: src/torch/ only. Thread-safe.
#pragma once

#include <torch/torch.h>

namespace gradsync {

enum class OptimizerKind { kSgd, kAdam, kAdamW, kOther };

inline OptimizerKind optimizerKind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) return OptimizerKind::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) return OptimizerKind::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) {
    return OptimizerKind::kAdamW;
  }
  return OptimizerKind::kOther;
}

inline bool isSgd(const torch::optim::Optimizer& optimizer) {
  return optimizerKind(optimizer) == OptimizerKind::kSgd;
}
inline bool isAdam(const torch::optim::Optimizer& optimizer) {
  return optimizerKind(optimizer) == OptimizerKind::kAdam;
}
inline bool isAdamW(const torch::optim::Optimizer& optimizer) {
  return optimizerKind(optimizer) == OptimizerKind::kAdamW;
}
// Adam or AdamW: the two whose state is exp_avg and exp_avg_sq.
inline bool isAdamFamily(const torch::optim::Optimizer& optimizer) {
  const OptimizerKind kind = optimizerKind(optimizer);
  return kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW;
}

// Whether a param group of an Adam or AdamW (`kind`) keeps the maximum of the second moment.
inline bool usesAmsgrad(const torch::optim::OptimizerOptions& options, OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW
             ? static_cast<const torch::optim::AdamWOptions&>(options).amsgrad()
             : static_cast<const torch::optim::AdamOptions&>(options).amsgrad();
}

}  // namespace gradsync
