// 1-bit Adam's exchange (Tang et al. 2021; DeepSpeed's OnebitAdam, 0/1 Adam's variance freeze)
// on gradsync's compressors: SyncOptions::compressMomentum (--compress-momentum). Under Adam the
// update divides each coordinate by the root of its second moment, so a compressor's error on
// the gradient becomes a badly scaled step (docs/algorithms.md, "Compression under Adam"). After
// the dense warm-up the second moment v is frozen, and what the ranks exchange is each one's
// momentum m_r = β1·m + (1 − β1)·g_r: compressed by the engine with its error feedback, averaged
// to m̄ = β1·m + (1 − β1)·mean(g_r) (exactly so with a lossless codec), which becomes every rank's
// m. The update is AdamW's with m̄ over the frozen v, bias-corrected as at the freeze (W: the
// warm-up's steps), v rising only where m̄ outgrows it:
//   v ← max(v, β2·v + (1 − β2)·m̄²);  p ← p·(1 − lr·wd);
//   p ← p − lr/(1 − β1^t) · m̄ / (sqrt(v)/sqrt(1 − β2^min(t, W)) + eps).
// Adam (its L2 weight decay folded into g first) and AdamW, without amsgrad; the learning rate
// is read every step, so schedules apply. A parameter without Adam state (never stepped) is left
// alone. Training thread (the gradient hooks run on it too).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

class CompressedMomentum {
 public:
  // `parameters`: the indices toMomentum() is given refer to them. ConfigError unless
  // `optimizer` is torch::optim::Adam or AdamW without amsgrad, or when `warmupSteps` < 1 (the
  // frozen second moment comes from the dense warm-up's steps).
  CompressedMomentum(torch::optim::Optimizer& optimizer, std::vector<torch::Tensor> parameters,
                     int64_t warmupSteps);
  // The constructor's checks of `optimizer` and `warmupSteps` alone, for p3, where the engine
  // runs 1-bit Adam (UpdateRule::varianceFrozenAfter) and no CompressedMomentum is built.
  static void check(const torch::optim::Optimizer& optimizer, int64_t warmupSteps);

  // Whether this step exchanges momenta (it is past the dense warm-up).
  bool frozen() const { return step_ >= warmupSteps_; }
  // The global step this one is (after a resume), and the end of each step.
  void setStep(int64_t step) { step_ = step; }
  void endStep() { ++step_; }

  // This rank's gradient of parameters[index] becomes its momentum, in place (Adam's L2 term
  // added first). Left as it is without Adam state.
  void toMomentum(size_t index, std::span<float> gradient);
  // The same for every parameter's .grad (an undefined one taken as zero), where no engine's
  // hooks saw the gradients (one worker).
  void gradientsToMomenta();
  // After the exchange: each .grad holds the averaged momentum, which becomes its parameter's
  // m; the update is applied with v unchanged; Adam's step count advances.
  void applyUpdate();

 private:
  struct Hyper {
    double lr, beta1, beta2, eps, weightDecay;
  };
  Hyper hyperOf(size_t index) const;
  // Adam's or AdamW's per-parameter state; null before the parameter's first step.
  torch::optim::OptimizerParamState* stateOf(const torch::Tensor& parameter) const;
  torch::Tensor& expAvg(torch::optim::OptimizerParamState& state) const;
  torch::Tensor& expAvgSq(torch::optim::OptimizerParamState& state) const;
  int64_t& stepCount(torch::optim::OptimizerParamState& state) const;

  torch::optim::Optimizer& optimizer_;
  const std::vector<torch::Tensor> parameters_;
  std::vector<size_t> groupOf_;  // by parameter: its param group
  const bool decoupled_;         // AdamW: decoupled weight decay; Adam: L2 folded into the gradient
  const int64_t warmupSteps_;
  int64_t step_ = 0;
};

}  // namespace gradsync
