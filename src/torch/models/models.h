// The models of `gradsync train --model`, defined exactly as docs/models.md (and
// benchmarks/peers/ddp_models.py, for side-by-side runs with PyTorch DDP). Input 1x28x28,
// 10 classes; gpt (gpt.h) takes token ids.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch/models/fc_exchange_layer.h"

namespace gradsync {

// One link of a model seen as a chain (pipeline stages are runs of these): `module` holds its
// parameters (may have none), `forward` runs it and the parameterless work after it up to the
// next link (a functional ReLU, a pool), as `gradsync profile` times a layer. `name` is the
// module's name in named_modules(), which is also the profile's layer name.
struct PipelineLayer {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// A fully-connected layer, y = x W^T + b, as sharded's FC exchange sees it.
struct LinearLayer {
  const torch::nn::Module* module = nullptr;  // what the pre-forward hook and run() see
  torch::Tensor weight;                       // out x in
  torch::Tensor bias;                         // out, or undefined
};

class Model : public torch::nn::Module {
 public:
  using PreForwardHook = std::function<void(const torch::nn::Module& layer)>;

  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // The model as a chain of layers whose composition, in order, is forward() (bitwise), sharing
  // this model's parameters: what `--pipeline` splits into stages. Every parameter belongs to
  // exactly one layer, and the layers' parameters in order are parameters() in order. Empty: the
  // model cannot be split.
  virtual std::vector<PipelineLayer> pipelineLayers() { return {}; }
  // Called with each layer (or residual block) just before its forward runs, in forward order:
  // DistributedModel waits there for that layer's parameters (p3, sharded), so the forward
  // overlaps the previous step's communication. Empty: no hook.
  void setPreForwardHook(PreForwardHook hook) { preForward_ = std::move(hook); }

  // Whether forward computes predictions worth evaluating. Emulated compute (emulated_model.h)
  // returns placeholders: the trainer then skips evaluations.
  virtual bool predicts() const { return true; }
  // Seconds of work an emulated device was given so far (the profile's forward, backward and
  // update times, whatever the host's own delays); 0 for a model that computes on the host.
  virtual double deviceSeconds() const { return 0; }
  // Gradient mode's optimizer step (fifo, wfbp, fusion, localsgd): `optimizer.step()`. Emulated
  // compute spends the profile's update time on its device instead.
  virtual void optimizerStep(torch::optim::Optimizer& optimizer) { optimizer.step(); }

  // The fully-connected layers whose forward runs through run() (every torch::nn::Linear of
  // gradsync's models, in registration order; emulated compute: the profile's "linear" layers).
  virtual std::vector<LinearLayer> linearLayers();
  // From now on `layer` (one of linearLayers()) runs through `exchange` (null: its own forward
  // again). DistributedModel sets it for sharded:fc=exchange|auto.
  void setExchange(const torch::nn::Module& layer, std::shared_ptr<FcExchangeLayer> exchange);

 protected:
  // The exchange `layer` runs through, or null.
  FcExchangeLayer* exchangeOf(const torch::nn::Module& layer) const {
    auto found = exchanges_.find(&layer);
    return found == exchanges_.end() ? nullptr : found->second.get();
  }
  // The pre-forward hook with `layer`, for models that do not run their layers through run().
  void beforeLayer(const torch::nn::Module& layer) {
    if (preForward_) preForward_(layer);
  }
  // Whether a hook is set: DistributedModel sets one in update mode only.
  bool hasPreForwardHook() const { return static_cast<bool>(preForward_); }

  // `layer`'s forward, after the hook.
  template <typename Layer>
  torch::Tensor run(Layer& layer, const torch::Tensor& x) {
    if (preForward_) preForward_(*layer);
    if (FcExchangeLayer* exchange = exchangeOf(*layer)) return exchange->forward(x);
    return layer->forward(x);
  }
  // Each module of `sequence` in turn, each after the hook.
  torch::Tensor runSequential(torch::nn::Sequential& sequence, torch::Tensor x) {
    for (auto& layer : *sequence) {
      if (preForward_) preForward_(*layer.ptr());
      FcExchangeLayer* exchange = exchangeOf(*layer.ptr());
      x = exchange ? exchange->forward(x) : layer.forward(x);
    }
    return x;
  }

 private:
  PreForwardHook preForward_;
  std::unordered_map<const torch::nn::Module*, std::shared_ptr<FcExchangeLayer>> exchanges_;
};

// Re-draws every Linear and Conv2d weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and
// every Embedding from N(0, 1), the distributions of PyTorch's default initialisation (LayerNorm
// and BatchNorm keep their ones and zeros), from a private generator seeded with
// `seed`: the result depends on the seed alone, never on other threads using torch's global
// generator (ranks run as threads in tests and the simulator).
void initializeParameters(torch::nn::Module& model, uint64_t seed);

// Every layer in training mode; with `freezeBatchNorm`, BatchNorm layers stay in evaluation
// mode: they normalise with their running statistics and do not update them.
void enterTrainingMode(torch::nn::Module& model, bool freezeBatchNorm);

// mlp, cnn, resnet20, vgg11, the GroupNorm variants cnn-gn and vgg11-gn (models_gn.cc), which
// train without batch statistics (a batch of one, pipelined backprop), and the language model
// gpt[:layers=L,width=D,heads=A,context=T] (torch/models/gpt.h). Throws ConfigError listing the
// valid names.
std::shared_ptr<Model> makeModel(const std::string& name);
const std::vector<std::string>& modelNames();

}  // namespace gradsync
