#include "torch/pipeline/stage.h"

#include "common/check.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

std::vector<std::span<float>> spansOf(const std::vector<torch::Tensor>& tensors) {
  std::vector<std::span<float>> spans;
  for (const torch::Tensor& t : tensors) {
    spans.push_back(floatSpan(t));
  }
  return spans;
}

// Puts the current weights back when a forward or backward throws with others swapped in.
template <typename End>
struct Swapped {
  End end;
  ~Swapped() { end(); }
};

}  // namespace

ReplicaAverager::ReplicaAverager(const std::vector<torch::Tensor>& like, Transport& replicas,
                                 const SyncOptions& options)
    : carrier_(std::make_shared<torch::nn::Module>("StageGradients")) {
  for (size_t i = 0; i < like.size(); ++i) {
    parameters_.push_back(
        carrier_->register_parameter(std::to_string(i), torch::zeros_like(like[i])));
  }
  optimizer_ = std::make_unique<torch::optim::SGD>(parameters_, torch::optim::SGDOptions(1.0));
  distributed_ = std::make_unique<DistributedOptimizer>(*optimizer_, carrier_, replicas, options);
}

ReplicaAverager::~ReplicaAverager() = default;

void ReplicaAverager::average(std::vector<torch::Tensor>& gradients) {
  if (parameters_.empty()) return;
  distributed_->zeroGrad();
  torch::Tensor carried = torch::zeros({});
  for (size_t i = 0; i < parameters_.size(); ++i) {
    carried = carried + (parameters_[i] * gradients[i]).sum();
  }
  carried.backward();
  distributed_->synchronize();
  for (size_t i = 0; i < parameters_.size(); ++i) gradients[i].copy_(parameters_[i].grad());
}

PipelineStage::PipelineStage(std::shared_ptr<Model> model, std::vector<PipelineLayer> layers,
                             bool first, bool last, StageRule rule, double lossScale)
    : model_(std::move(model)),
      layers_(std::move(layers)),
      first_(first),
      last_(last),
      lossScale_(lossScale) {
  for (const PipelineLayer& layer : layers_) {
    for (const torch::Tensor& p : layer.module->parameters()) parameters_.push_back(p);
  }
  optimizer_ = std::make_unique<StageOptimizer>(spansOf(parameters_), rule);
}

PipelineStage::~PipelineStage() = default;

torch::Tensor PipelineStage::run(const torch::Tensor& input) {
  torch::Tensor x = input;
  for (const PipelineLayer& layer : layers_) x = layer.forward(x);
  return x;
}

torch::Tensor PipelineStage::forward(int64_t micro, const torch::Tensor& input, int64_t delay) {
  GS_CHECK(!last_);
  torch::Tensor in = first_ ? input : input.detach().requires_grad_(true);
  torch::Tensor out;
  {
    optimizer_->beginForward(micro, delay);
    Swapped end{[&] { optimizer_->endForward(micro); }};
    out = run(in);
  }
  graphs_[micro] = {in, out};
  return out.detach().contiguous();
}

float PipelineStage::forwardLoss(int64_t micro, const torch::Tensor& input,
                                 const torch::Tensor& labels, int64_t delay) {
  GS_CHECK(last_);
  torch::Tensor in = first_ ? input : input.detach().requires_grad_(true);
  torch::Tensor loss;
  {
    optimizer_->beginForward(micro, delay);
    Swapped end{[&] { optimizer_->endForward(micro); }};
    loss = torch::nn::functional::cross_entropy(run(in), labels);
  }
  graphs_[micro] = {in, lossScale_ == 1 ? loss : loss * lossScale_};
  return loss.item<float>();
}

torch::Tensor PipelineStage::backward(int64_t micro, const torch::Tensor& outputGradient) {
  auto found = graphs_.find(micro);
  GS_CHECK(found != graphs_.end());
  Graph graph = std::move(found->second);
  graphs_.erase(found);
  if (graph.output.requires_grad()) {  // else: no parameters, and the model's input before it
    optimizer_->beginBackward(micro);
    Swapped end{[&] { optimizer_->endBackward(micro); }};
    if (last_) {
      graph.output.backward();
    } else {
      graph.output.backward(outputGradient);
    }
  }
  if (first_) return {};
  return graph.input.grad().contiguous();
}

void PipelineStage::update(int64_t micro) {
  std::vector<torch::Tensor> gradients;
  for (torch::Tensor& p : parameters_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    gradients.push_back(p.grad());
  }
  if (replicas_) replicas_->average(gradients);
  std::vector<std::span<const float>> spans;
  for (const torch::Tensor& g : gradients) {
    spans.push_back(floatSpan(g));
  }
  optimizer_->update(spans, micro);
  for (torch::Tensor& p : parameters_) p.mutable_grad().zero_();
}

torch::Tensor PipelineStage::infer(const torch::Tensor& input) {
  torch::NoGradGuard noGrad;
  return run(input).contiguous();
}

std::vector<float> PipelineStage::flatParameters() const {
  std::vector<float> flat;
  for (const torch::Tensor& p : parameters_) {
    const float* data = p.data_ptr<float>();
    flat.insert(flat.end(), data, data + p.numel());
  }
  return flat;
}

}  // namespace gradsync
