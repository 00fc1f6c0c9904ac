// A copy of a model's parameters and buffers and of its optimizer's state, kept in memory to go
// back to: an elastic member's commit (torch/elastic/round.h), taken after every step with p3
// and sharded. So it copies tensors into copies it reuses from one take() to the next instead of
// serializing them: the model's, and SGD's, Adam's and AdamW's state (plain_state.h); another
// optimizer's state (sign descent) goes through an archive. Not thread-safe; the model and the
// optimizer given to restore must be those given to take() (the same tensors, in the same
// order).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace gradsync {

class StateSnapshot {
 public:
  void take(torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  // Both back as they were at the last take(), which there must have been.
  void restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer) const;
  void restoreOptimizer(torch::optim::Optimizer& optimizer) const;

 private:
  std::vector<torch::Tensor> model_;  // parameters, then buffers
  // A plain optimizer state's tensors by parameter (empty where it had none) and step counts.
  std::vector<std::vector<torch::Tensor>> optimizer_;
  std::vector<int64_t> steps_;
  std::vector<uint8_t> archive_;  // any other optimizer's state
};

}  // namespace gradsync
