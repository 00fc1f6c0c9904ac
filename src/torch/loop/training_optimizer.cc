#include "torch/loop/training_optimizer.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "gradsync/torch/distributed_optimizer.h"
#include "gradsync/torch/sign_descent.h"

namespace gradsync {

std::unique_ptr<FusedSGD> makeFusedSgd(const Model& net, const TrainOptions& options) {
  std::vector<torch::Tensor> plain;
  std::vector<torch::Tensor> absorbed;
  const std::vector<bool> absorbs =
      DistributedOptimizer::absorbsMomentum(net, syncOptionsOf(options));
  std::vector<torch::Tensor> parameters = net.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    (absorbs[i] ? absorbed : plain).push_back(parameters[i]);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto sgd = [&](double momentum) {
    return std::make_unique<torch::optim::SGDOptions>(
        torch::optim::SGDOptions(options.lr).momentum(momentum));
  };
  groups.emplace_back(plain, sgd(options.momentum));
  if (!absorbed.empty()) groups.emplace_back(absorbed, sgd(0));
  return std::make_unique<FusedSGD>(
      std::move(groups), torch::optim::SGDOptions(options.lr),
      FusedSgdOptions{.lars = options.lars, .fused = options.fusedUpdate});
}

std::unique_ptr<torch::optim::Optimizer> makeTrainingOptimizer(const Model& net,
                                                               const TrainOptions& options) {
  if (options.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        net.parameters(), torch::optim::AdamWOptions(options.lr).weight_decay(options.weightDecay));
  }
  if (options.optimizer == "sign") {
    return std::make_unique<SignDescent>(
        net.parameters(), SignDescentOptions(options.lr).weight_decay(options.weightDecay));
  }
  return makeFusedSgd(net, options);
}

double scheduledLearningRate(const TrainOptions& options, int64_t step, int64_t total) {
  const int64_t warmup = options.warmupSteps;
  if (step < warmup) return options.lr * static_cast<double>(step + 1) / warmup;
  if (options.lrSchedule != "cosine" || total <= warmup + 1) return options.lr;
  constexpr double kFinalFraction = 0.1;
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(total - 1 - warmup);
  const double cosine = 0.5 * (1 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
  return options.lr * (kFinalFraction + (1 - kFinalFraction) * cosine);
}

void prepareOptimizerStep(torch::optim::Optimizer& optimizer, const TrainOptions& options,
                          int64_t step, int64_t total) {
  if (options.warmupSteps > 0 || options.lrSchedule != "constant") {
    const double lr = scheduledLearningRate(options, step, total);
    for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
      group.options().set_lr(lr);
    }
  }
  if (options.clipGradNorm > 0) {
    std::vector<torch::Tensor> parameters;
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
      for (const torch::Tensor& p : group.params()) parameters.push_back(p);
    }
    torch::nn::utils::clip_grad_norm_(parameters, options.clipGradNorm);
  }
}

}  // namespace gradsync
