// SignDescent: steps each parameter by the sign of its gradient, with decoupled weight decay,
//   p ← p·(1 − lr·wd) − lr·sign(g)      (sign(0) = 0: a coordinate with no gradient stays),
// the update of DeMo (Peng et al. 2024): with `--compress demo:K,ef_decay=β` the gradient it sees
// is the ranks' average of what each sent of its momentum (docs/algorithms.md, "DeMo"), and
// `gradsync train --optimizer sign` builds it. Stateless: save and load (torch's defaults) write
// and read nothing. A torch::optim::Optimizer, so learning-rate schedules and DistributedOptimizer
// take it; the engine's own update (p3, sharded, parameter servers) does not implement it and
// refuses it. Not thread-safe: one caller steps it, as any torch optimizer.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace gradsync {

struct SignDescentOptions : public torch::optim::OptimizerCloneableOptions<SignDescentOptions> {
  explicit SignDescentOptions(double lr = 1e-3) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, weight_decay) = 0;

  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

class SignDescent : public torch::optim::Optimizer {
 public:
  SignDescent(std::vector<torch::Tensor> parameters, SignDescentOptions defaults);

  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace gradsync
