#include "torch/loop/training_optimizer.h"

#include <vector>

#include "gradsync/torch/distributed_optimizer.h"

namespace gradsync {

std::unique_ptr<FusedSGD> makeTrainingOptimizer(const Model& net, const TrainOptions& options) {
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

}  // namespace gradsync
