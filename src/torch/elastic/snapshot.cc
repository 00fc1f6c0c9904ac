#include "torch/elastic/snapshot.h"

#include "common/check.h"
#include "torch/api/archive_bytes.h"
#include "torch/elastic/plain_state.h"

namespace gradsync {
namespace {

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
  if (!hasPlainState(optimizer)) {
    archive_ = archiveBytes([&](auto& archive) { optimizer.save(archive); });
    return;
  }
  const PlainOptimizerState plain = plainStateOf(optimizer);
  optimizer_.resize(plain.tensors.size());
  for (size_t i = 0; i < plain.tensors.size(); ++i) copyTensors(optimizer_[i], plain.tensors[i]);
  steps_ = plain.steps;
}

void StateSnapshot::restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer) const {
  const std::vector<torch::Tensor> tensors = modelTensors(model);
  GS_CHECK(tensors.size() == model_.size());
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(model_[i]);
  restoreOptimizer(optimizer);
}

void StateSnapshot::restoreOptimizer(torch::optim::Optimizer& optimizer) const {
  if (!hasPlainState(optimizer)) {
    return loadArchiveBytes(archive_, "the last commit's optimizer state",
                            [&](auto& archive) { optimizer.load(archive); });
  }
  // The optimizer keeps training on what it is given: copies, so that the snapshot stays.
  PlainOptimizerState plain{.tensors = {}, .steps = steps_};
  for (const std::vector<torch::Tensor>& tensors : optimizer_) {
    std::vector<torch::Tensor>& copies = plain.tensors.emplace_back();
    for (const torch::Tensor& t : tensors) copies.push_back(t.defined() ? t.clone() : t);
  }
  setPlainState(optimizer, plain);
}

}  // namespace gradsync
