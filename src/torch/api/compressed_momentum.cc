// 1-bit Adam's exchange (compressed_momentum.h). The arithmetic follows torch::optim::AdamW's
// and Adam's step in LibTorch 1.13 term by term, so that with a lossless exchange and an
// unchanged v it is their update (tested against a naive replay in compressed_momentum_test.cc).
#include "torch/api/compressed_momentum.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gradsync/error.h"
#include "torch/api/optimizer_kind.h"

namespace gradsync {
void CompressedMomentum::check(const torch::optim::Optimizer& optimizer, int64_t warmupSteps) {
  if (!isAdamFamily(optimizer)) {
    throw ConfigError("compressed momentum (1-bit Adam) needs an Adam or AdamW optimizer",
                      {.hint = "use --optimizer adamw, or drop --compress-momentum"});
  }
  if (warmupSteps < 1) {
    throw ConfigError(
        "compressed momentum (1-bit Adam) freezes the second moment after the dense warm-up, "
        "which is 0 steps",
        {.hint = "give the compression a warm-up (--compress-warmup STEPS)"});
  }
  for (const auto& group : optimizer.param_groups()) {
    if (usesAmsgrad(group.options(), optimizerKind(optimizer))) {
      throw ConfigError("compressed momentum (1-bit Adam) does not support amsgrad",
                        {.hint = "construct the optimizer with amsgrad(false)"});
    }
  }
}

CompressedMomentum::CompressedMomentum(torch::optim::Optimizer& optimizer,
                                       std::vector<torch::Tensor> parameters, int64_t warmupSteps)
    : optimizer_(optimizer),
      parameters_(std::move(parameters)),
      decoupled_(isAdamW(optimizer)),
      warmupSteps_(warmupSteps) {
  check(optimizer, warmupSteps);
  const auto& groups = optimizer.param_groups();
  for (const torch::Tensor& p : parameters_) {  // DistributedOptimizer checked that it is there
    size_t g = 0;
    while (g + 1 < groups.size() &&
           std::none_of(groups[g].params().begin(), groups[g].params().end(),
                        [&](const torch::Tensor& q) { return q.is_same(p); })) {
      ++g;
    }
    groupOf_.push_back(g);
  }
}

CompressedMomentum::Hyper CompressedMomentum::hyperOf(size_t index) const {
  const auto& options = optimizer_.param_groups()[groupOf_[index]].options();
  if (decoupled_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(options);
    return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay()};
  }
  const auto& o = static_cast<const torch::optim::AdamOptions&>(options);
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay()};
}

torch::optim::OptimizerParamState* CompressedMomentum::stateOf(
    const torch::Tensor& parameter) const {
  auto& states = optimizer_.state();
  auto found = states.find(c10::guts::to_string(parameter.unsafeGetTensorImpl()));
  return found == states.end() ? nullptr : found->second.get();
}

torch::Tensor& CompressedMomentum::expAvg(torch::optim::OptimizerParamState& state) const {
  return decoupled_ ? static_cast<torch::optim::AdamWParamState&>(state).exp_avg()
                    : static_cast<torch::optim::AdamParamState&>(state).exp_avg();
}

torch::Tensor& CompressedMomentum::expAvgSq(torch::optim::OptimizerParamState& state) const {
  return decoupled_ ? static_cast<torch::optim::AdamWParamState&>(state).exp_avg_sq()
                    : static_cast<torch::optim::AdamParamState&>(state).exp_avg_sq();
}

int64_t& CompressedMomentum::stepCount(torch::optim::OptimizerParamState& state) const {
  return decoupled_ ? static_cast<torch::optim::AdamWParamState&>(state).step()
                    : static_cast<torch::optim::AdamParamState&>(state).step();
}

void CompressedMomentum::toMomentum(size_t index, std::span<float> gradient) {
  const torch::Tensor& p = parameters_.at(index);
  torch::optim::OptimizerParamState* state = stateOf(p);
  if (state == nullptr) return;
  torch::NoGradGuard noGrad;
  const Hyper h = hyperOf(index);
  torch::Tensor g = torch::from_blob(gradient.data(), p.sizes());
  if (!decoupled_ && h.weightDecay != 0) g.add_(p, h.weightDecay);  // Adam's L2
  // Adam's order: m.mul(β1).add(g, 1 − β1).
  g.copy_(expAvg(*state).mul(h.beta1).add_(g, 1 - h.beta1));
}

void CompressedMomentum::gradientsToMomenta() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor p = parameters_[i];
    if (stateOf(p) == nullptr) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    toMomentum(i, {p.mutable_grad().data_ptr<float>(), static_cast<size_t>(p.numel())});
  }
}

void CompressedMomentum::applyUpdate() {
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    torch::Tensor p = parameters_[i];
    torch::optim::OptimizerParamState* state = stateOf(p);
    if (state == nullptr || !p.grad().defined()) continue;
    const Hyper h = hyperOf(i);
    if (decoupled_) p.mul_(1 - h.lr * h.weightDecay);
    int64_t& step = stepCount(*state);
    step += 1;
    const double bias1 = 1 - std::pow(h.beta1, static_cast<double>(step));
    // v stopped at the warm-up's end, and so does its bias correction: with 1 − β2^t of the
    // current step the denominator would shrink as t grows (at step 600 after a freeze at 57,
    // by sqrt(0.055 / 0.45): a learning rate 2.9 times the schedule's).
    const double bias2 =
        1 - std::pow(h.beta2, static_cast<double>(std::min<int64_t>(step, warmupSteps_)));
    torch::Tensor& m = expAvg(*state);
    m.copy_(p.grad());
    // Where the momentum outgrows the frozen v (a coordinate the warm-up saw little or no
    // gradient for: v ~ 0 would make the step m / eps), v takes Adam's own step from m̄:
    // max(v, β2·v + (1 − β2)·m̄²). Elsewhere (|m̄| below the warm-up's RMS gradient) v stays
    // frozen, bit for bit. m̄ is every rank's, so v stays the same on every rank.
    torch::Tensor& v = expAvgSq(*state);
    v.copy_(torch::maximum(v, v.mul(h.beta2).addcmul_(m, m, 1 - h.beta2)));
    const torch::Tensor denom = (v.sqrt() / std::sqrt(bias2)).add_(h.eps);
    p.addcdiv_(m, denom, -h.lr / bias1);
  }
}

}  // namespace gradsync
