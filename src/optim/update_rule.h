// The optimizer rules applied to slices of parameters where torch's optimizer cannot run on
// whole tensors: by the gradient engine as each unit's average arrives (p3, sharded) and by the
// parameter servers on the units they own. Each computes, element by element, what
// torch::optim (LibTorch 1.13) computes for the whole tensor; the results agree up to float
// rounding (torch's vectorised kernels may fuse a multiply-add; this code does not).
//
// Torch-free and stateless: the caller owns the parameters, gradients and state and passes
// the spans. Thread-safe (pure functions over disjoint spans).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace gradsync {

struct UpdateRule {
  enum class Kind { kSgd, kAdam, kAdamW, kAdagrad };
  Kind kind = Kind::kSgd;
  double lr = 0;
  // SGD: v = momentum·v + (1 − dampening)·g (v = g on the first step), then p −= lr·v, or with
  // Nesterov p −= lr·(g + momentum·v).
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  // Adam and AdamW: the moments' decay rates and the denominator's epsilon (Adagrad's too:
  // torch's default for it is 1e-10, see adagrad()).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // SGD and Adam add weightDecay·p to the gradient (L2); AdamW decays the parameters apart
  // from the gradient (p ·= 1 − lr·weightDecay).
  double weightDecay = 0;
  // 1-bit Adam in the engine (SyncOptions::compressMomentum with p3; Adam and AdamW only):
  // 0 is off. W > 0: steps 1..W are Adam's; from step W + 1 on, what the ranks exchange is each
  // one's momentum (gradientToMomentum), `gradients` is their average m̄, and the update freezes
  // the second moment (applyUpdate's comment).
  uint64_t varianceFrozenAfter = 0;

  // Whether the update of 1-based step `step` takes averaged momenta (varianceFrozenAfter).
  bool exchangesMomenta(uint64_t step) const {
    return varianceFrozenAfter > 0 && step > varianceFrozenAfter;
  }

  static UpdateRule sgd(double lr, double momentum = 0) {
    return {.kind = Kind::kSgd, .lr = lr, .momentum = momentum};
  }
  // Adagrad as torch::optim::Adagrad (no learning-rate decay, initial accumulator 0):
  // s += g², p −= lr·g / (√s + eps). The usual optimizer of embedding tables: a row's steps
  // shrink with the updates it has had, so rare rows still move. Its state is s.
  static UpdateRule adagrad(double lr, double eps = 1e-10) {
    return {.kind = Kind::kAdagrad, .lr = lr, .eps = eps};
  }
  // Adam and AdamW whose state restarted at zero after the job's first step (sharded's moments
  // in a new elastic round; docs/cluster.md): the factor on lr of the state's 1-based step
  // `stateStep`, rising linearly to 1 over the first moment's horizon, ceil(1 / (1 − beta1))
  // steps (10 at 0.9). A fresh Adam's first steps are about lr·sign(g), far longer than the
  // job's steps by then. 1 for the other rules, and from then on.
  double restartRamp(uint64_t stateStep) const;
  // Floats of state per parameter element: SGD with momentum 1 (the velocity), without 0;
  // Adam and AdamW 2 (the first and second moments); Adagrad 1 (the sum of squares).
  size_t stateSlots() const;
  // "sgd(lr=0.1, momentum=0.9)", for logs and errors.
  std::string describe() const;
};

// The state of a span of elements: stateSlots() of these are used, each as long as the span.
struct UpdateState {
  std::span<float> first;   // SGD's velocity; Adam's first moment; Adagrad's sum of squares
  std::span<float> second;  // Adam's second moment
};

// Applies `rule` once: `parameters` move by `gradients`. `step` counts the updates these
// elements have had, this one included (1 on the first): Adam's bias correction and SGD's
// first step (where the velocity becomes the gradient) depend on it. Throws nothing; sizes are
// checked (GS_CHECK).
// Where rule.exchangesMomenta(step), `gradients` is the ranks' averaged momentum m̄, and the
// update is src/torch/api/compressed_momentum.h's (W = varianceFrozenAfter):
//   m ← m̄;  v ← max(v, β2·v + (1 − β2)·m̄²);  p ← p·(1 − lr·wd) (AdamW);
//   p ← p − lr/(1 − β1^t) · m̄ / (sqrt(v)/sqrt(1 − β2^min(t, W)) + eps).
void applyUpdate(const UpdateRule& rule, std::span<float> parameters,
                 std::span<const float> gradients, UpdateState state, uint64_t step);

// 1-bit Adam's exchange: this rank's gradient of `parameters` becomes, in place, its momentum
// β1·m + (1 − β1)·g (Adam's L2 term weightDecay·p added to g first; AdamW's decay is the
// update's), `firstMoment` being the elements' m after the last update. Adam and AdamW only.
void gradientToMomentum(const UpdateRule& rule, std::span<const float> parameters,
                        std::span<float> gradient, std::span<const float> firstMoment);

}  // namespace gradsync
