#include "torch/elastic/snapshot.h"

#include <memory>
#include <string>

#include "common/check.h"
#include "torch/api/archive_bytes.h"
#include "torch/api/optimizer_state_key.h"

namespace gradsync {
namespace {

std::vector<torch::Tensor> modelTensors(torch::nn::Module& model) {
  std::vector<torch::Tensor> tensors = model.parameters();
  for (const torch::Tensor& buffer : model.buffers()) tensors.push_back(buffer);
  return tensors;
}

std::vector<torch::Tensor> parametersOf(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups()) {
    parameters.insert(parameters.end(), group.params().begin(), group.params().end());
  }
  return parameters;
}

// into[i] becomes a copy of from[i], in place where it already has its shape and type.
void copyTensors(std::vector<torch::Tensor>& into, const std::vector<torch::Tensor>& from) {
  torch::NoGradGuard noGrad;
  into.resize(from.size());
  for (size_t i = 0; i < from.size(); ++i) {
    if (!from[i].defined()) {
      into[i] = torch::Tensor();
    } else if (into[i].defined() && into[i].sizes() == from[i].sizes() &&
               into[i].dtype() == from[i].dtype()) {
      into[i].copy_(from[i]);
    } else {
      into[i] = from[i].detach().clone();
    }
  }
}

}  // namespace

void StateSnapshot::take(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  copyTensors(model_, modelTensors(model));
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd == nullptr) {
    archive_ = archiveBytes([&](auto& archive) { optimizer.save(archive); });
    return;
  }
  std::vector<torch::Tensor> momenta;
  for (const torch::Tensor& p : parametersOf(optimizer)) {
    auto found = sgd->state().find(optimizerStateKey(p));
    momenta.push_back(
        found == sgd->state().end()
            ? torch::Tensor()
            : static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer());
  }
  copyTensors(momenta_, momenta);
}

void StateSnapshot::restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer) const {
  const std::vector<torch::Tensor> tensors = modelTensors(model);
  GS_CHECK(tensors.size() == model_.size());
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(model_[i]);
  restoreOptimizer(optimizer);
}

void StateSnapshot::restoreOptimizer(torch::optim::Optimizer& optimizer) const {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd == nullptr) {
    return loadArchiveBytes(archive_, "the last commit's optimizer state",
                            [&](auto& archive) { optimizer.load(archive); });
  }
  const std::vector<torch::Tensor> parameters = parametersOf(optimizer);
  GS_CHECK(parameters.size() == momenta_.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string key = optimizerStateKey(parameters[i]);
    if (!momenta_[i].defined()) {
      sgd->state().erase(key);
      continue;
    }
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(momenta_[i].clone());
    sgd->state()[key] = std::move(state);
  }
}

}  // namespace gradsync
