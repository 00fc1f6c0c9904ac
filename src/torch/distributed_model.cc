#include "torch/distributed_model.h"

#include <cstring>

#include "common/logging.h"
#include "gradsync/collectives.h"

namespace gradsync {
namespace {

// Collectives on the training thread use their own tag, apart from the engine's gradient stream.
const CollectiveOptions kStateTag{.tag = 1};

std::span<float> floats(torch::Tensor& tensor) {
  return {tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel())};
}

}  // namespace

DistributedModel::DistributedModel(std::shared_ptr<Model> model, Transport& transport,
                                   EngineOptions options)
    : model_(std::move(model)), transport_(transport) {
  std::vector<TensorShape> tensors;
  for (const auto& item : model_->named_parameters()) {
    parameters_.push_back(item.value());
    tensors.push_back(tensorShape(item.key(), item.value().sizes().vec()));
  }
  // Alone, the average of the gradients is the gradient: no hooks, no copies, no engine.
  if (transport.size() == 1) {
    if (options.compression.spec != "none" || !options.compression.overrides.empty()) {
      GS_LOG(kWarn, "one worker communicates nothing: --compress has no effect");
    }
    return;
  }
  engine_ = std::make_unique<GradientEngine>(transport, tensors, std::move(options));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    GradientEngine* engine = engine_.get();
    int index = static_cast<int>(i);
    // Fires once per backward, as soon as this parameter's gradient is computed (before it is
    // accumulated into .grad); the hook returns nothing, leaving the gradient unchanged.
    hooks_.push_back(parameters_[i].register_hook([engine, index](torch::Tensor grad) {
      torch::Tensor dense = grad.contiguous();
      std::span<float> slot = engine->slot(index);
      std::memcpy(slot.data(), dense.data_ptr<float>(), slot.size_bytes());
      engine->markReady(index);
    }));
  }
}

DistributedModel::~DistributedModel() {
  for (size_t i = 0; i < hooks_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
}

void DistributedModel::broadcastState() {
  torch::NoGradGuard noGrad;
  for (auto& parameter : model_->parameters())
    broadcast(transport_, floats(parameter), 0, kStateTag);
  for (auto& buffer : model_->buffers()) {
    if (buffer.scalar_type() == torch::kFloat) broadcast(transport_, floats(buffer), 0, kStateTag);
  }
}

void DistributedModel::synchronizeGradients() {
  if (!engine_) return;
  engine_->finishStep();
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::span<float> average = engine_->slot(static_cast<int>(i));
    torch::Tensor view = torch::from_blob(average.data(), parameters_[i].sizes());
    if (parameters_[i].grad().defined()) {
      parameters_[i].mutable_grad().copy_(view);
    } else {
      parameters_[i].mutable_grad() = view.clone();
    }
  }
}

void DistributedModel::averageBuffers() {
  torch::NoGradGuard noGrad;
  for (auto& buffer : model_->buffers()) {
    // running_mean/var are floats; num_batches_tracked (int64) is the same on every rank.
    if (buffer.scalar_type() == torch::kFloat)
      allreduce(transport_, floats(buffer), ReduceOp::kAverage, kStateTag);
  }
}

}  // namespace gradsync
