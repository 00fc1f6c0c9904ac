#include "torch/models/models.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <fmt/ranges.h>
#include <cmath>
#include <optional>

#include "gradsync/error.h"
#include "torch/models/catalog.h"
#include "torch/models/gpt.h"
#include "torch/models/models_gn.h"

namespace gradsync {

namespace nn = torch::nn;

// A chain of two Sequentials: every module of `features`, then `between` (in the last
// feature's link, where `gradsync profile` counts it), then every module of `classifier`.
std::vector<PipelineLayer> chainLayers(nn::Sequential& features, nn::Sequential& classifier,
                                       TensorMap between) {
  std::vector<PipelineLayer> layers;
  auto add = [&](nn::Sequential& sequence, const std::string& prefix, bool last) {
    size_t i = 0;
    for (const nn::AnyModule& item : *sequence) {
      TensorMap after = last && i + 1 == sequence->size() ? between : TensorMap();
      layers.push_back({fmt::format("{}.{}", prefix, i++), item.ptr(),
                        [module = item, after](const torch::Tensor& x) mutable {
                          torch::Tensor h = module.forward(x);
                          return after ? after(h) : h;
                        }});
    }
  };
  add(features, "features", true);
  add(classifier, "classifier", false);
  return layers;
}

torch::Tensor globalPool(const torch::Tensor& x) {
  return torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
}

namespace {

// 784-512-512-10 with ReLU.
class Mlp final : public Model {
 public:
  Mlp() {
    fc1_ = register_module("fc1", nn::Linear(784, 512));
    fc2_ = register_module("fc2", nn::Linear(512, 512));
    fc3_ = register_module("fc3", nn::Linear(512, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h = torch::relu(run(fc1_, x.flatten(1)));
    h = torch::relu(run(fc2_, h));
    return run(fc3_, h);
  }
  std::vector<PipelineLayer> pipelineLayers() override {
    return {{"fc1", fc1_.ptr(),
             [fc1 = fc1_.ptr()](const torch::Tensor& x) {
               return torch::relu(fc1->forward(x.flatten(1)));
             }},
            {"fc2", fc2_.ptr(),
             [fc2 = fc2_.ptr()](const torch::Tensor& h) { return torch::relu(fc2->forward(h)); }},
            {"fc3", fc3_.ptr(),
             [fc3 = fc3_.ptr()](const torch::Tensor& h) { return fc3->forward(h); }}};
  }

 private:
  nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

// conv 1->32 k5 p2, ReLU, pool 2; conv 32->64 k5 p2, ReLU, pool 2; fc 3136->512, ReLU; fc 512->10.
class Cnn final : public Model {
 public:
  Cnn() {
    conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 5).padding(2)));
    conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 5).padding(2)));
    fc1_ = register_module("fc1", nn::Linear(3136, 512));
    fc2_ = register_module("fc2", nn::Linear(512, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h = torch::max_pool2d(torch::relu(run(conv1_, x)), 2);
    h = torch::max_pool2d(torch::relu(run(conv2_, h)), 2);
    h = torch::relu(run(fc1_, h.flatten(1)));
    return run(fc2_, h);
  }
  std::vector<PipelineLayer> pipelineLayers() override {
    return {{"conv1", conv1_.ptr(),
             [conv1 = conv1_.ptr()](const torch::Tensor& x) {
               return torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
             }},
            {"conv2", conv2_.ptr(),
             [conv2 = conv2_.ptr()](const torch::Tensor& h) {
               return torch::max_pool2d(torch::relu(conv2->forward(h)), 2);
             }},
            {"fc1", fc1_.ptr(),
             [fc1 = fc1_.ptr()](const torch::Tensor& h) {
               return torch::relu(fc1->forward(h.flatten(1)));
             }},
            {"fc2", fc2_.ptr(),
             [fc2 = fc2_.ptr()](const torch::Tensor& h) { return fc2->forward(h); }}};
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// He et al.'s basic block; a 1x1 conv + BN shortcut where the shape changes (option B).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", conv3x3(in, out, stride));
    bn1_ = register_module("bn1", nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", conv3x3(out, out, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(bn1_->forward(conv1_->forward(x)));
    h = bn2_->forward(conv2_->forward(h));
    return torch::relu(h + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential shortcut_{nullptr};
};

class ResNet20 final : public Model {
 public:
  ResNet20() {
    stem_ = register_module("conv1", conv3x3(1, 16, 1));
    bn_ = register_module("bn1", nn::BatchNorm2d(16));
    int64_t in = 16;
    for (int stage = 0; stage < 3; ++stage) {
      int64_t out = 16 << stage;
      nn::ModuleList layer;  // children named 0, 1, 2: parameters layerS.B.conv1.weight, ...
      for (int block = 0; block < 3; ++block) {
        int64_t stride = stage > 0 && block == 0 ? 2 : 1;
        auto basic = std::make_shared<BasicBlock>(in, out, stride);
        layer->push_back(basic);
        blocks_.push_back(basic);
        blockNames_.push_back(fmt::format("layer{}.{}", stage + 1, block));
        in = out;
      }
      register_module(fmt::format("layer{}", stage + 1), layer);
    }
    fc_ = register_module("fc", nn::Linear(64, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h = torch::relu(run(bn_, run(stem_, x)));
    for (auto& block : blocks_) h = run(block, h);
    h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return run(fc_, h);
  }
  // The global pool runs in the last block's link, where `gradsync profile` counts it.
  std::vector<PipelineLayer> pipelineLayers() override {
    std::vector<PipelineLayer> layers = {
        {"conv1", stem_.ptr(),
         [stem = stem_.ptr()](const torch::Tensor& x) { return stem->forward(x); }},
        {"bn1", bn_.ptr(),
         [bn = bn_.ptr()](const torch::Tensor& h) { return torch::relu(bn->forward(h)); }}};
    for (size_t i = 0; i < blocks_.size(); ++i) {
      std::shared_ptr<BasicBlock> block = blocks_[i];
      const bool last = i + 1 == blocks_.size();
      layers.push_back({blockNames_[i], block, [block, last](const torch::Tensor& h) {
                          torch::Tensor out = block->forward(h);
                          return last ? torch::adaptive_avg_pool2d(out, {1, 1}).flatten(1) : out;
                        }});
    }
    layers.push_back(
        {"fc", fc_.ptr(), [fc = fc_.ptr()](const torch::Tensor& h) { return fc->forward(h); }});
    return layers;
  }

 private:
  nn::Conv2d stem_{nullptr};
  nn::BatchNorm2d bn_{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  std::vector<std::string> blockNames_;
  nn::Linear fc_{nullptr};
};

// VGG-11 with BatchNorm; 3 max-pools for 28x28 (28->14->7->3), global average pool, 512-512-10.
class Vgg11 final : public Model {
 public:
  Vgg11() {
    const int64_t kPool = -1;
    const int64_t plan[] = {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, 512, 512};
    int64_t in = 1;
    for (int64_t v : plan) {
      if (v == kPool) {
        features_->push_back(nn::MaxPool2d(2));
        continue;
      }
      features_->push_back(nn::Conv2d(nn::Conv2dOptions(in, v, 3).padding(1)));
      features_->push_back(nn::BatchNorm2d(v));
      features_->push_back(nn::ReLU());
      in = v;
    }
    register_module("features", features_);
    // classifier.0 and classifier.2, as torchvision names them.
    classifier_->push_back(nn::Linear(512, 512));
    classifier_->push_back(nn::ReLU());
    classifier_->push_back(nn::Linear(512, 10));
    register_module("classifier", classifier_);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return runSequential(classifier_, globalPool(runSequential(features_, x)));
  }
  std::vector<PipelineLayer> pipelineLayers() override {
    return chainLayers(features_, classifier_, globalPool);
  }

 private:
  nn::Sequential features_;
  nn::Sequential classifier_;
};

}  // namespace

std::vector<LinearLayer> Model::linearLayers() {
  std::vector<LinearLayer> layers;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<nn::Linear>()) {
      layers.push_back({module.get(), linear->weight, linear->bias});
    }
  }
  return layers;
}

void Model::setExchange(const torch::nn::Module& layer, std::shared_ptr<FcExchangeLayer> exchange) {
  if (exchange) {
    exchanges_[&layer] = std::move(exchange);
  } else {
    exchanges_.erase(&layer);
  }
}

void initializeParameters(torch::nn::Module& model, uint64_t seed) {
  torch::NoGradGuard noGrad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& module : model.modules(/*include_self=*/false)) {
    torch::Tensor weight;
    torch::Tensor bias;
    if (auto* linear = module->as<nn::Linear>()) {
      weight = linear->weight;
      bias = linear->bias;
    } else if (auto* conv = module->as<nn::Conv2d>()) {
      weight = conv->weight;
      bias = conv->bias;
    } else if (auto* embedding = module->as<nn::Embedding>()) {
      embedding->weight.normal_(0, 1, generator);  // torch's default for an embedding
      continue;
    } else {
      continue;
    }
    double fanIn = static_cast<double>(weight.numel() / weight.size(0));
    double bound = 1.0 / std::sqrt(fanIn);
    weight.uniform_(-bound, bound, generator);
    if (bias.defined()) bias.uniform_(-bound, bound, generator);
  }
}

const std::vector<std::string>& modelNames() {
  static const std::vector<std::string> kNames = {"mlp",    "cnn",      "resnet20", "vgg11",
                                                  "cnn-gn", "vgg11-gn", "gpt"};
  return kNames;
}

std::shared_ptr<Model> makeModel(const std::string& name) {
  if (name == "mlp") return std::make_shared<Mlp>();
  if (name == "cnn") return std::make_shared<Cnn>();
  if (name == "resnet20") return std::make_shared<ResNet20>();
  if (name == "vgg11") return std::make_shared<Vgg11>();
  if (name == "cnn-gn") return makeCnnGn();
  if (name == "vgg11-gn") return makeVgg11Gn();
  if (std::optional<GptConfig> gpt = parseGptModel(name)) return makeGpt(*gpt);
  throw ConfigError(fmt::format("unknown model '{}'", name),
                    {.hint = fmt::format("choose one of {}", fmt::join(modelNames(), ", "))});
}

std::vector<TensorShape> describeModel(const std::string& model) {
  std::vector<TensorShape> tensors;
  for (const auto& item : makeModel(model)->named_parameters()) {
    tensors.push_back(tensorShape(item.key(), item.value().sizes().vec()));
  }
  return tensors;
}

std::vector<int64_t> modelOutputShape(const std::string& model, int64_t batch) {
  torch::NoGradGuard noGrad;
  auto instance = makeModel(model);
  instance->eval();
  if (const size_t context = gptContextOf(model); context > 0) {
    return instance->forward(torch::zeros({batch, static_cast<int64_t>(context)}, torch::kLong))
        .sizes()
        .vec();
  }
  return instance->forward(torch::zeros({batch, 1, 28, 28})).sizes().vec();
}

void enterTrainingMode(torch::nn::Module& model, bool freezeBatchNorm) {
  model.train();
  if (!freezeBatchNorm) return;
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (module->as<torch::nn::BatchNorm2d>()) module->eval();
  }
}

}  // namespace gradsync
