#include "gradsync/torch/sign_descent.h"

namespace gradsync {

SignDescent::SignDescent(std::vector<torch::Tensor> parameters, SignDescentOptions defaults)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(std::move(parameters))},
                              std::make_unique<SignDescentOptions>(defaults)) {}

torch::Tensor SignDescent::step(LossClosure closure) {
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const SignDescentOptions&>(group.options());
    for (torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
      p.add_(p.grad().sign(), -options.lr());
    }
  }
  return loss;
}

}  // namespace gradsync
