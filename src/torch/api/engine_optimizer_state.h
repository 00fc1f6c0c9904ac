// The optimizer state an engine keeps in update mode (p3, sharded, servers: Engine::
// optimizerState, SGD's velocity or Adam's two moments, each by tensor in registration order),
// moved into a torch optimizer's own state and back, so that checkpoints and elastic commits
// hold it where they hold any optimizer's: one format whatever the schedule, and whole whatever
// the world size (sharded gathers it). Not thread-safe; between steps. Torch headers: src/torch/.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gradsync {

// Floats of engine state per parameter element for `optimizer`: SGD 1, Adam and AdamW 2; 0 for
// an optimizer the engine does not run (its state is never the engine's).
size_t engineStateSlots(const torch::optim::Optimizer& optimizer);

// Replaces `optimizer`'s state of `parameters` with `state` (engineStateSlots() arrays of every
// parameter's elements, one after the other), as torch's own step would have left it after
// `steps` steps (Adam's and AdamW's step count: their bias correction). Copies: the optimizer
// owns what it is given.
void engineStateIntoOptimizer(std::span<const float> state,
                              const std::vector<torch::Tensor>& parameters, int64_t steps,
                              torch::optim::Optimizer& optimizer);
// The same arrays from `optimizer`'s state of `parameters`; a parameter without state (none
// saved, or a run without momentum) gives zeros, as at a run's start.
std::vector<float> engineStateFromOptimizer(const std::vector<torch::Tensor>& parameters,
                                            const torch::optim::Optimizer& optimizer);
// The steps that state has taken (Engine::setOptimizerState's count): Adam's and AdamW's step,
// the largest of `parameters`' (0 if none has state: zero moments are a fresh Adam's); none for
// SGD, whose velocity has no count.
std::optional<uint64_t> engineStateSteps(const std::vector<torch::Tensor>& parameters,
                                         const torch::optim::Optimizer& optimizer);

}  // namespace gradsync
