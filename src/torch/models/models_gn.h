// The GroupNorm models and what they share with models.cc (internal to the model files).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "torch/models/models.h"

namespace gradsync {

using TensorMap = std::function<torch::Tensor(const torch::Tensor&)>;

// A model's chain (Model::pipelineLayers) when it is two Sequentials: every module of
// `features`, then `between` (run in the last feature's link, where `gradsync profile` counts
// it), then every module of `classifier`. Layer names as named_modules() gives them.
std::vector<PipelineLayer> chainLayers(torch::nn::Sequential& features,
                                       torch::nn::Sequential& classifier, TensorMap between);
// Global average pooling to one value per channel, flattened.
torch::Tensor globalPool(const torch::Tensor& x);

// cnn-gn: cnn with GroupNorm (8 groups) after each conv, every module a link of its own.
std::shared_ptr<Model> makeCnnGn();
// vgg11-gn: vgg11 with GroupNorm (32 groups) in place of BatchNorm.
std::shared_ptr<Model> makeVgg11Gn();

}  // namespace gradsync
