#include "optim/update_rule.h"

#include <fmt/format.h>

#include <cmath>

#include "common/check.h"

namespace gradsync {
namespace {

void sgd(const UpdateRule& rule, std::span<float> p, std::span<const float> g, std::span<float> v,
         uint64_t step) {
  const auto lr = static_cast<float>(rule.lr);
  const auto momentum = static_cast<float>(rule.momentum);
  const auto damped = static_cast<float>(1.0 - rule.dampening);
  const auto decay = static_cast<float>(rule.weightDecay);
  for (size_t i = 0; i < p.size(); ++i) {
    float d = decay != 0 ? g[i] + decay * p[i] : g[i];
    if (momentum != 0) {
      // torch starts the velocity as the gradient itself; from zero, that differs only with
      // dampening (so a velocity restored from a checkpoint is kept whatever `step` says).
      v[i] = step <= 1 && damped != 1 ? d : momentum * v[i] + damped * d;
      d = rule.nesterov ? d + momentum * v[i] : v[i];
    }
    p[i] -= lr * d;
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
      return fmt::format("{}(lr={}, betas=({}, {}), eps={}, weight_decay={})",
                         kind == Kind::kAdam ? "adam" : "adamw", lr, beta1, beta2, eps,
                         weightDecay);
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
  adam(rule, parameters, gradients, state.first, state.second, step);
}

}  // namespace gradsync
