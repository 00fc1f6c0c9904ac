// One pipeline stage's weights over time: the optimizer state (SGD with momentum), the weights'
// version, and what a forward and a backward see (docs/algorithms.md, "Pipelined
// backpropagation"):
//   - plain pb: a forward runs on the current weights, and its backward, updates later, on the
//     weights current then (weight inconsistency) and its gradient is applied late (staleness);
//   - --weight-stash: the backward runs on the forward's weights, kept for it (PipeDream's
//     stashing): only the staleness remains;
//   - LWP (--compensate lwp): the forward runs on the weights predicted `delay` updates ahead;
//     the backward on the current ones, or with DelayCompensation::predictBackward on the
//     forward's prediction;
//   - SC (--compensate sc): the update is SC_D with D the measured delay, the updates since the
//     forward of the micro-batch whose gradient it applies.
// The weights live in the caller's storage (a stage's torch parameters); this class swaps other
// weights into that storage around a forward or a backward, so that autograd, which saved
// references to the storage, computes with them. Torch-free. Not thread-safe: the stage's
// thread calls every method.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "optim/delay_compensation.h"

namespace gradsync {

struct StageRule {
  double lr = 0;
  double momentum = 0;
  double weightDecay = 0;
  DelayCompensation compensation;
  bool weightStash = false;
};

class StageOptimizer {
 public:
  // `parameters`: the stage's weights by tensor, in the caller's storage, which must outlive
  // this object (an empty list: a stage without parameters, whose calls do nothing).
  StageOptimizer(std::vector<std::span<float>> parameters, StageRule rule);

  // Around micro-batch `micro`'s forward, which `delay` updates of this stage will separate
  // from its own update (PipelineShape::delay): notes the weights' version; with LWP, the
  // forward runs on the prediction; afterwards the current weights are back in the storage.
  void beginForward(int64_t micro, int64_t delay);
  void endForward(int64_t micro);
  // Around `micro`'s backward: with a stash (or LWP's predictBackward) the forward's weights are
  // in the storage while it runs; else the current weights are used.
  void beginBackward(int64_t micro);
  void endBackward(int64_t micro);
  // Applies `gradients` (by tensor, as the parameters) for the micro-batches up to `micro`
  // (fill-drain: the step's; pb: `micro` alone), whose forwards share one version, and forgets
  // them. With SC the delay is the updates since that version.
  void update(const std::vector<std::span<const float>>& gradients, int64_t micro);

  uint64_t updates() const { return updates_; }
  int64_t lastDelay() const { return lastDelay_; }  // of the last update
  // Micro-batches whose forward ran and whose update did not (the pipeline's occupancy).
  size_t inFlight() const { return versions_.size(); }
  // The velocity of tensor `i` (empty without momentum), for tests and checkpoints.
  std::span<const float> velocity(size_t i) const { return velocity_[i]; }

 private:
  struct Forward {
    uint64_t version = 0;
    std::vector<std::vector<float>> weights;  // kept for the backward; empty: not kept
  };
  void keepCurrent();     // storage → current_
  void restoreCurrent();  // current_ → storage
  bool keepsForwardWeights() const;

  std::vector<std::span<float>> parameters_;
  const StageRule rule_;
  std::vector<std::vector<float>> velocity_;  // by tensor; empty vectors without momentum
  std::vector<std::vector<float>> current_;   // the current weights while others are swapped in
  std::map<int64_t, Forward> versions_;       // by micro-batch, until its update
  uint64_t updates_ = 0;
  int64_t lastDelay_ = 0;
  bool predicted_ = false;  // the storage holds a forward's prediction
};

}  // namespace gradsync
