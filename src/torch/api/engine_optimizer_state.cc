#include "torch/api/engine_optimizer_state.h"

#include <algorithm>
#include <memory>

#include "common/check.h"
#include "torch/api/optimizer_kind.h"
#include "torch/api/optimizer_state_key.h"

namespace gradsync {
namespace {

// Adam's and AdamW's state: the same fields under two unrelated types.
template <typename State>
std::unique_ptr<State> adamState(torch::Tensor first, torch::Tensor second, int64_t steps) {
  auto state = std::make_unique<State>();
  state->step(steps);
  state->exp_avg(std::move(first));
  state->exp_avg_sq(std::move(second));
  return state;
}

// The optimizer's tensors of one parameter, by slot; undefined where it has none.
std::vector<torch::Tensor> stateTensors(const torch::optim::Optimizer& optimizer,
                                        const torch::Tensor& parameter) {
  const auto& states = optimizer.state();
  auto found = states.find(optimizerStateKey(parameter));
  if (found == states.end()) return {};
  const torch::optim::OptimizerParamState& s = *found->second;
  if (isAdam(optimizer)) {
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(s);
    return {adam.exp_avg(), adam.exp_avg_sq()};
  }
  if (isAdamW(optimizer)) {
    const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(s);
    return {adamw.exp_avg(), adamw.exp_avg_sq()};
  }
  return {static_cast<const torch::optim::SGDParamState&>(s).momentum_buffer()};
}

}  // namespace

size_t engineStateSlots(const torch::optim::Optimizer& optimizer) {
  if (isSgd(optimizer)) return 1;
  return isAdamFamily(optimizer) ? 2 : 0;
}

void engineStateIntoOptimizer(std::span<const float> state,
                              const std::vector<torch::Tensor>& parameters, int64_t steps,
                              torch::optim::Optimizer& optimizer) {
  const size_t slots = engineStateSlots(optimizer);
  GS_CHECK(slots > 0 && state.size() % slots == 0);
  const size_t perSlot = state.size() / slots;
  size_t at = 0;
  for (const torch::Tensor& p : parameters) {
    auto slot = [&](size_t i) {
      GS_CHECK(at + static_cast<size_t>(p.numel()) <= perSlot);
      return torch::from_blob(const_cast<float*>(state.data() + i * perSlot + at), p.sizes())
          .clone();
    };
    std::unique_ptr<torch::optim::OptimizerParamState> s;
    if (isAdam(optimizer)) {
      s = adamState<torch::optim::AdamParamState>(slot(0), slot(1), steps);
    } else if (isAdamW(optimizer)) {
      s = adamState<torch::optim::AdamWParamState>(slot(0), slot(1), steps);
    } else {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(slot(0));
      s = std::move(sgd);
    }
    optimizer.state()[optimizerStateKey(p)] = std::move(s);
    at += static_cast<size_t>(p.numel());
  }
  GS_CHECK(at == perSlot);
}

std::vector<float> engineStateFromOptimizer(const std::vector<torch::Tensor>& parameters,
                                            const torch::optim::Optimizer& optimizer) {
  const size_t slots = engineStateSlots(optimizer);
  GS_CHECK(slots > 0);
  size_t elements = 0;
  for (const torch::Tensor& p : parameters) elements += static_cast<size_t>(p.numel());
  std::vector<float> state(slots * elements, 0.0f);
  size_t at = 0;
  for (const torch::Tensor& p : parameters) {
    const std::vector<torch::Tensor> tensors = stateTensors(optimizer, p);
    for (size_t i = 0; i < tensors.size() && i < slots; ++i) {
      if (!tensors[i].defined()) continue;
      GS_CHECK(tensors[i].numel() == p.numel());
      const torch::Tensor values = tensors[i].to(torch::kFloat32).contiguous();
      std::copy_n(values.data_ptr<float>(), values.numel(), state.data() + i * elements + at);
    }
    at += static_cast<size_t>(p.numel());
  }
  return state;
}

std::optional<uint64_t> engineStateSteps(const std::vector<torch::Tensor>& parameters,
                                         const torch::optim::Optimizer& optimizer) {
  if (!isAdamFamily(optimizer)) return std::nullopt;
  int64_t steps = 0;
  const auto& states = optimizer.state();
  for (const torch::Tensor& p : parameters) {
    auto found = states.find(optimizerStateKey(p));
    if (found == states.end()) continue;
    const torch::optim::OptimizerParamState& s = *found->second;
    steps = std::max(steps, isAdam(optimizer)
                                ? static_cast<const torch::optim::AdamParamState&>(s).step()
                                : static_cast<const torch::optim::AdamWParamState&>(s).step());
  }
  return static_cast<uint64_t>(steps);
}

}  // namespace gradsync
