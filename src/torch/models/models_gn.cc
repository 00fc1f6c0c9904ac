// Models that normalise without batch statistics (docs/models.md, "GroupNorm variants"):
// pipelined backprop trains them one sample at a time, where BatchNorm cannot work.
#include <fmt/format.h>

#include "torch/models/models_gn.h"

namespace gradsync {
namespace {

namespace nn = torch::nn;

// `features`, a map between, then `classifier`, each module a link of the pipeline chain.
class ChainModel final : public Model {
 public:
  ChainModel(nn::Sequential features, nn::Sequential classifier, TensorMap between)
      : features_(register_module("features", std::move(features))),
        classifier_(register_module("classifier", std::move(classifier))),
        between_(std::move(between)) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return runSequential(classifier_, between_(runSequential(features_, x)));
  }
  std::vector<PipelineLayer> pipelineLayers() override {
    return chainLayers(features_, classifier_, between_);
  }

 private:
  nn::Sequential features_;
  nn::Sequential classifier_;
  TensorMap between_;
};

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).padding(kernel / 2));
}

}  // namespace

// conv 1->32 k5, GN(8), ReLU, pool 2; conv 32->64 k5, GN(8), ReLU, pool 2; fc 3136->512, ReLU;
// fc 512->10.
std::shared_ptr<Model> makeCnnGn() {
  nn::Sequential features(conv(1, 32, 5), nn::GroupNorm(8, 32), nn::ReLU(), nn::MaxPool2d(2),
                          conv(32, 64, 5), nn::GroupNorm(8, 64), nn::ReLU(), nn::MaxPool2d(2));
  nn::Sequential classifier(nn::Linear(3136, 512), nn::ReLU(), nn::Linear(512, 10));
  return std::make_shared<ChainModel>(features, classifier,
                                      [](const torch::Tensor& h) { return h.flatten(1); });
}

// vgg11's plan (models.cc) with GroupNorm(32, C) after each conv.
std::shared_ptr<Model> makeVgg11Gn() {
  const int64_t kPool = -1;
  const int64_t plan[] = {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, 512, 512};
  nn::Sequential features;
  int64_t in = 1;
  for (int64_t v : plan) {
    if (v == kPool) {
      features->push_back(nn::MaxPool2d(2));
      continue;
    }
    features->push_back(conv(in, v, 3));
    features->push_back(nn::GroupNorm(32, v));
    features->push_back(nn::ReLU());
    in = v;
  }
  nn::Sequential classifier(nn::Linear(512, 512), nn::ReLU(), nn::Linear(512, 10));
  return std::make_shared<ChainModel>(features, classifier, globalPool);
}

}  // namespace gradsync
