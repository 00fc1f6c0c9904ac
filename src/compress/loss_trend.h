// The compression guardrail's loss signal (docs/algorithms.md, "The compression guardrail"):
// the training loss of each guard window against the dense warm-up's last window. A method
// whose per-unit signals look fine can still do harm the loss shows; the dense warm-up is the
// reference of what the loss did without compression.
//
// Each rank accumulates its own losses; at a guard check every rank contributes four numbers
// (its window's sum and count, its reference window's sum and count), and the ratio of the means
// over all ranks is the same on every rank. Training thread only: not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "common/state_bytes.h"

namespace gradsync {

class LossTrend {
 public:
  // The reference is the last `windowSteps` steps before `warmupSteps` (the dense warm-up's
  // end); without a warm-up there is none and ratio() is always -1.
  LossTrend(int64_t warmupSteps, int64_t windowSteps);

  // The loss of `step` on this rank (each step once, in order). A NaN or infinite loss counts:
  // it makes the window's mean NaN, which the guard reads as past any threshold.
  void observe(uint64_t step, double loss);

  static constexpr size_t kValues = 4;
  using Contribution = std::array<double, kValues>;
  // This rank's share of the check that closes the current window (the losses observed after
  // the warm-up since the last call), and starts the next window.
  Contribution takeWindow();
  // The window's mean loss over every rank's contributions divided by the reference's mean:
  // NaN if any loss was; -1 when there is no reference or no loss of the window.
  static double ratio(std::span<const Contribution> ranks);

  // For checkpoints: the reference and the open window, and back.
  void saveState(StateWriter& out) const;
  void loadState(StateReader& in);

 private:
  uint64_t warmup_;
  uint64_t referenceBegin_;  // the reference window: [referenceBegin_, warmup_)
  double referenceSum_ = 0;
  double referenceCount_ = 0;
  double windowSum_ = 0;
  double windowCount_ = 0;
};

}  // namespace gradsync
