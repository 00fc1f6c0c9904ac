#include "optim/update_rule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "common/check.h"

namespace gradsync {
namespace {

// torch's CPU kernels for `a.add_(b, alpha)` round a + alpha * b once (a fused multiply-add)
// wherever ATen dispatches its AVX2 or AVX-512 kernels, and twice with its default ones. The
// engine's SGD rounds as torch's does on this machine, so that p3, sharded and the servers give
// torch::optim::SGD's bits: one ulp apart per step, an unnormalised residual network amplified
// to 2e-4 within 4 steps under the AVX2 kernels (measured; Trainer.P3AndShardedGiveWfbpParameters).
bool torchFusesMultiplyAdd() {
#if defined(__x86_64__)
  // ATen's own override of the dispatch, honoured the same way.
  const char* capability = std::getenv("ATEN_CPU_CAPABILITY");
  if (capability != nullptr && std::string_view(capability) == "default") return false;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

template <bool kFused>
inline float multiplyAdd(float a, float b, float c) {
  if constexpr (kFused) return std::fma(a, b, c);
  return a * b + c;  // -ffp-contract=off (CMakeLists.txt) keeps GCC from contracting this
}

// The steps of torch::optim::SGD::step (torch 1.13), each a torch `add` with alpha.
template <bool kFused>
inline void sgdLoop(const UpdateRule& rule, std::span<float> p, std::span<const float> g,
                    std::span<float> v, uint64_t step) {
  const auto lr = static_cast<float>(rule.lr);
  const auto momentum = static_cast<float>(rule.momentum);
  const auto damped = static_cast<float>(1.0 - rule.dampening);
  const auto decay = static_cast<float>(rule.weightDecay);
  for (size_t i = 0; i < p.size(); ++i) {
    float d = decay != 0 ? multiplyAdd<kFused>(decay, p[i], g[i]) : g[i];
    if (momentum != 0) {
      // torch starts the velocity as the gradient itself; from zero, that differs only with
      // dampening (so a velocity restored from a checkpoint is kept whatever `step` says).
      v[i] = step <= 1 && damped != 1 ? d : multiplyAdd<kFused>(damped, d, momentum * v[i]);
      d = rule.nesterov ? multiplyAdd<kFused>(momentum, v[i], d) : v[i];
    }
    p[i] = multiplyAdd<kFused>(-lr, d, p[i]);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma")))
#endif
void sgdFused(const UpdateRule& rule, std::span<float> p, std::span<const float> g,
              std::span<float> v, uint64_t step) {
  sgdLoop<true>(rule, p, g, v, step);
}

void sgd(const UpdateRule& rule, std::span<float> p, std::span<const float> g, std::span<float> v,
         uint64_t step) {
  static const bool fused = torchFusesMultiplyAdd();
  if (fused) {
    sgdFused(rule, p, g, v, step);
  } else {
    sgdLoop<false>(rule, p, g, v, step);
  }
}

void adam(const UpdateRule& rule, std::span<float> p, std::span<const float> g, std::span<float> m,
          std::span<float> v, uint64_t step) {
  const bool decoupled = rule.kind == UpdateRule::Kind::kAdamW;
  // (1 - beta) is formed in double, as torch does: 1 - 0.999f would be 4.7e-5 off 0.001.
  const auto beta1 = static_cast<float>(rule.beta1);
  const auto beta2 = static_cast<float>(rule.beta2);
  const auto keep1 = static_cast<float>(1.0 - rule.beta1);
  const auto keep2 = static_cast<float>(1.0 - rule.beta2);
  const auto eps = static_cast<float>(rule.eps);
  const auto decay = static_cast<float>(rule.weightDecay);
  const auto shrink = static_cast<float>(1.0 - rule.lr * rule.weightDecay);
  const double t = static_cast<double>(step);
  const auto stepSize = static_cast<float>(rule.lr / (1.0 - std::pow(rule.beta1, t)));
  const auto rootCorrection2 = static_cast<float>(std::sqrt(1.0 - std::pow(rule.beta2, t)));
  for (size_t i = 0; i < p.size(); ++i) {
    float grad = g[i];
    if (decay != 0) {
      if (decoupled) {
        p[i] *= shrink;
      } else {
        grad += decay * p[i];
      }
    }
    m[i] = beta1 * m[i] + keep1 * grad;
    v[i] = beta2 * v[i] + keep2 * grad * grad;
    p[i] -= stepSize * (m[i] / (std::sqrt(v[i]) / rootCorrection2 + eps));
  }
}

// Past 1-bit Adam's warm-up (UpdateRule::varianceFrozenAfter): g is the averaged momentum m̄.
void adamFrozen(const UpdateRule& rule, std::span<float> p, std::span<const float> g,
                std::span<float> m, std::span<float> v, uint64_t step) {
  const bool decoupled = rule.kind == UpdateRule::Kind::kAdamW;
  const auto beta2 = static_cast<float>(rule.beta2);
  const auto keep2 = static_cast<float>(1.0 - rule.beta2);
  const auto eps = static_cast<float>(rule.eps);
  const auto shrink = static_cast<float>(1.0 - rule.lr * rule.weightDecay);
  const double t = static_cast<double>(step);
  const auto stepSize = static_cast<float>(rule.lr / (1.0 - std::pow(rule.beta1, t)));
  // v stopped at the warm-up's end, and so does its bias correction (compressed_momentum.cc).
  const double frozenT = static_cast<double>(std::min(step, rule.varianceFrozenAfter));
  const auto rootCorrection2 = static_cast<float>(std::sqrt(1.0 - std::pow(rule.beta2, frozenT)));
  for (size_t i = 0; i < p.size(); ++i) {
    if (decoupled && rule.weightDecay != 0) p[i] *= shrink;
    m[i] = g[i];
    v[i] = std::max(v[i], beta2 * v[i] + keep2 * g[i] * g[i]);
    p[i] -= stepSize * (m[i] / (std::sqrt(v[i]) / rootCorrection2 + eps));
  }
}

// torch 1.13's Adagrad step (no lr decay): sum.addcmul_(g, g); p.addcdiv_(g, sum.sqrt() + eps,
// -lr).
void adagrad(const UpdateRule& rule, std::span<float> p, std::span<const float> g,
             std::span<float> sum) {
  const auto negativeLr = static_cast<float>(-rule.lr);
  const auto eps = static_cast<float>(rule.eps);
  const auto decay = static_cast<float>(rule.weightDecay);
  for (size_t i = 0; i < p.size(); ++i) {
    const float grad = decay != 0 ? g[i] + decay * p[i] : g[i];
    sum[i] += grad * grad;
    p[i] += negativeLr * grad / (std::sqrt(sum[i]) + eps);
  }
}

}  // namespace

double UpdateRule::restartRamp(uint64_t stateStep) const {
  if (kind != Kind::kAdam && kind != Kind::kAdamW) return 1.0;
  const double horizon = std::ceil(1.0 / (1.0 - beta1) - 1e-9);  // 1 / (1 - 0.9) is 10 + 2e-15
  return std::min(1.0, static_cast<double>(stateStep) / horizon);
}

size_t UpdateRule::stateSlots() const {
  if (kind == Kind::kSgd) return momentum != 0 ? 1 : 0;
  if (kind == Kind::kAdagrad) return 1;
  return 2;
}

std::string UpdateRule::describe() const {
  switch (kind) {
    case Kind::kSgd:
      return fmt::format("sgd(lr={}, momentum={}, dampening={}, nesterov={}, weight_decay={})", lr,
                         momentum, dampening, nesterov, weightDecay);
    case Kind::kAdam:
    case Kind::kAdamW:
      return fmt::format(
          "{}(lr={}, betas=({}, {}), eps={}, weight_decay={}){}",
          kind == Kind::kAdam ? "adam" : "adamw", lr, beta1, beta2, eps, weightDecay,
          varianceFrozenAfter == 0
              ? ""
              : fmt::format(", 1-bit Adam: momenta exchanged after step {}", varianceFrozenAfter));
    case Kind::kAdagrad:
      return fmt::format("adagrad(lr={}, eps={}, weight_decay={})", lr, eps, weightDecay);
  }
  return "?";
}

void applyUpdate(const UpdateRule& rule, std::span<float> parameters,
                 std::span<const float> gradients, UpdateState state, uint64_t step) {
  GS_CHECK(parameters.size() == gradients.size());
  GS_CHECK(rule.stateSlots() == 0 || state.first.size() == parameters.size());
  if (rule.kind == UpdateRule::Kind::kSgd) {
    sgd(rule, parameters, gradients, state.first, step);
    return;
  }
  if (rule.kind == UpdateRule::Kind::kAdagrad) {
    adagrad(rule, parameters, gradients, state.first);
    return;
  }
  GS_CHECK(state.first.size() == parameters.size() && state.second.size() == parameters.size());
  if (rule.exchangesMomenta(step)) {
    adamFrozen(rule, parameters, gradients, state.first, state.second, step);
  } else {
    adam(rule, parameters, gradients, state.first, state.second, step);
  }
}

void gradientToMomentum(const UpdateRule& rule, std::span<const float> parameters,
                        std::span<float> gradient, std::span<const float> firstMoment) {
  GS_CHECK(rule.kind == UpdateRule::Kind::kAdam || rule.kind == UpdateRule::Kind::kAdamW);
  GS_CHECK(parameters.size() == gradient.size() && firstMoment.size() == gradient.size());
  const auto beta1 = static_cast<float>(rule.beta1);
  const auto keep1 = static_cast<float>(1.0 - rule.beta1);
  const auto decay =
      rule.kind == UpdateRule::Kind::kAdam ? static_cast<float>(rule.weightDecay) : 0.0f;
  for (size_t i = 0; i < gradient.size(); ++i) {
    const float g = decay != 0 ? gradient[i] + decay * parameters[i] : gradient[i];
    gradient[i] = beta1 * firstMoment[i] + keep1 * g;
  }
}

}  // namespace gradsync
