// Compensations for a gradient that arrives late: Spike Compensation (SC) and Linear Weight
// Prediction (LWP) of pipelined backpropagation (Kosson et al., "Pipelined Backpropagation at
// Scale: Training Large Models without Batches", MLSys 2021), as transforms of SGD with momentum
// with the delay D as an input (docs/algorithms.md, "Pipelined backpropagation"). The pipeline
// (src/pipeline/) uses them with each stage's delay 2(S - 1 - s); the parameter servers with the
// staleness they measure for each push.
//
// Base rule (PyTorch's SGD, dampening 0): v ← m·v + g, w ← w − η·v. A gradient g computed on
// the weights of D updates ago:
//   SC_D   v ← m·v + g,  w ← w − η·(m^D·v + (1 − m^D)/(1 − m)·g)
//          The first D + 1 steps' worth of g's momentum, which an undelayed g would have applied
//          by now, comes at once (the "spike"); afterwards g's contributions are exactly the
//          undelayed ones (m^(D+j)·η·g at j updates after its arrival). D = 0 is plain momentum.
//   LWP_D  the forward pass uses ŵ = w − η·D·v: the weights predicted D updates ahead with the
//          current velocity, so that the gradient is computed near the weights it will update.
//
// Torch-free, stateless, thread-safe (pure functions over caller-owned spans).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "optim/update_rule.h"

namespace gradsync {

// Which compensations are on (`--compensate none|sc|lwp|sc+lwp`).
struct DelayCompensation {
  bool spike = false;    // SC
  bool predict = false;  // LWP: the forward runs on the predicted weights
  // LWP's open choice (the paper's was not verified): the backward also runs on the predicted
  // weights of its forward (true), or on the current ones, as plain pipelined backprop does
  // (false, the default). `--lwp-backward`.
  bool predictBackward = false;

  bool any() const { return spike || predict; }
  // "none", "sc", "lwp" or "sc+lwp" (also "lwp+sc"). Throws ConfigError listing the choices.
  static DelayCompensation parse(std::string_view spec);
  std::string describe() const;  // as parse accepts it
};

// SC_D's weights for momentum m in [0, 1): velocity m^D, gradient (1 − m^D)/(1 − m). With m = 0
// (no momentum) the rule is plain SGD whatever D is: velocity 0^D, gradient 1.
struct SpikeWeights {
  double velocity = 1;
  double gradient = 0;
};
SpikeWeights spikeWeights(double momentum, double delay);

// One SGD-with-momentum update (rule.kind kSgd; weight decay folded into g; no dampening, no
// Nesterov: ConfigError) for `gradients` computed `delay` updates ago. With `spike` it is SC_D,
// without it the plain rule (the same arithmetic as applyUpdate's SGD with momentum from a
// velocity that starts at zero). `velocity` may be empty only for momentum 0. Sizes are checked
// (GS_CHECK).
void applyDelayedSgd(const UpdateRule& rule, std::span<float> parameters,
                     std::span<const float> gradients, std::span<float> velocity, double delay,
                     bool spike);

// LWP_D: predicted = parameters − lr·delay·velocity. `predicted` may alias nothing else; an empty
// velocity (no momentum) predicts no movement.
void predictWeights(std::span<const float> parameters, std::span<const float> velocity, double lr,
                    double delay, std::span<float> predicted);

// The hyperparameter scaling from a reference recipe (batch B0, lr η0, momentum m0, mean-reduced
// loss) to batch B, so that training is unchanged to first order per sample:
//   m = m0^(B/B0)                          the momentum's horizon stays fixed in samples;
//   η = η0·(B/B0)·(1 − m)/(1 − m0)         each sample's total contribution η/((1 − m)·B) too.
// E.g. B0 128, η0 0.1, m0 0.9 → B 1: m ≈ 0.99918, η ≈ 6.4e-6. Schedules (warm-up, decay) scale in
// samples, not steps. Throws ConfigError for batches of 0 or a momentum outside [0, 1).
struct SgdRecipe {
  size_t batch = 1;
  double lr = 0;
  double momentum = 0;
};
SgdRecipe scaleRecipe(const SgdRecipe& reference, size_t batch);

}  // namespace gradsync
