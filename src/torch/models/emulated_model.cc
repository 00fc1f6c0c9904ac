#include "torch/models/emulated_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cstdint>

#include "gradsync/error.h"
#include "torch/models/emulated_device.h"

namespace gradsync {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gradients are views at offsets that move by up to this many elements from step to step.
constexpr int64_t kOffsetSpan = 1 << 16;
// The pool's values: N(0, 1) times a per-block factor exp(N(0, 1)) times this scale, so that
// magnitudes vary between blocks as a layer's gradients do (what sparsifiers select from).
constexpr int64_t kBlock = 4096;
constexpr double kGradientScale = 1e-3;
// The placeholder output: `batch` x this many logits.
constexpr int64_t kOutputs = 10;

uint64_t mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct EmulatedLayer {
  std::string name;
  std::vector<const torch::nn::Module*> owners;  // modules holding its parameters, in order
  std::vector<torch::Tensor> parameters;
  std::vector<int64_t> tensorIndex;  // of each parameter among all of the profile's tensors
  double forwardSeconds = 0;
  double backwardSeconds = 0;
  bool linear = false;  // the profile's kind: the FC exchange may take it
};

class EmulatedModel final : public Model {
 public:
  EmulatedModel(const ModelProfile& profile, int rank, uint64_t seed);

  torch::Tensor forward(const torch::Tensor& x) override;
  bool predicts() const override { return false; }
  double deviceSeconds() const override { return device_.busySeconds(); }
  std::vector<LinearLayer> linearLayers() override;
  void optimizerStep(torch::optim::Optimizer& optimizer) override;

  // Called by the layers' autograd nodes, in backward order: the layer's device time, then its
  // parameters' gradients.
  variable_list backwardLayer(size_t index, const torch::Tensor& gradient);

 private:
  torch::nn::Module& ownerOf(const std::string& tensorName, std::string& leaf);
  void makePool(int64_t largest, int rank);
  torch::Tensor gradientView(const EmulatedLayer& layer, size_t i) const;
  void afterBackward();  // autograd's final callback: what .grad holds until the next backward

  std::vector<EmulatedLayer> layers_;
  double updateSeconds_ = 0;
  uint64_t seed_ = 0;
  int rank_ = 0;
  torch::Tensor pool_;
  EmulatedDevice device_;
  int64_t step_ = -1;                 // the step being computed (a forward starts the next)
  int64_t batch_ = 0;                 // its rows
  bool callbackQueued_ = false;       // this backward's final callback
  std::vector<torch::Tensor> grads_;  // gradient mode: .grad buffers kept across steps
};

// One node of the autograd graph per layer: forward only passes the placeholder on (the device
// time is spent before it), backward spends the layer's backward time and returns its gradients.
struct EmulatedLayerFunction : public torch::autograd::Function<EmulatedLayerFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor h, at::TensorList parameters,
                               EmulatedModel* model, int64_t layer) {
    ctx->saved_data["model"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(model));
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["parameters"] = static_cast<int64_t>(parameters.size());
    return h.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list outputs) {
    auto* model =
        reinterpret_cast<EmulatedModel*>(static_cast<intptr_t>(ctx->saved_data["model"].toInt()));
    return model->backwardLayer(static_cast<size_t>(ctx->saved_data["layer"].toInt()), outputs[0]);
  }
};

EmulatedModel::EmulatedModel(const ModelProfile& profile, int rank, uint64_t seed)
    : updateSeconds_(profile.updateSeconds), seed_(seed), rank_(rank) {
  torch::NoGradGuard noGrad;
  int64_t index = 0;
  int64_t largest = 0;
  for (const LayerProfile& spec : profile.layers) {
    EmulatedLayer& layer = layers_.emplace_back();
    layer.name = spec.name;
    layer.forwardSeconds = spec.forwardSeconds;
    layer.backwardSeconds = spec.backwardSeconds;
    layer.linear = spec.kind == kLinearLayer;
    for (const TensorShape& tensor : spec.tensors) {
      std::string leaf;
      torch::nn::Module& owner = ownerOf(tensor.name, leaf);
      layer.parameters.push_back(owner.register_parameter(leaf, torch::zeros(tensor.dims)));
      layer.tensorIndex.push_back(index++);
      if (std::find(layer.owners.begin(), layer.owners.end(), &owner) == layer.owners.end())
        layer.owners.push_back(&owner);
      largest = std::max(largest, static_cast<int64_t>(tensor.elements));
    }
  }
  makePool(largest, rank);
}

// The module that holds `tensorName` ("layer1.0.conv1.weight": module layer1 > 0 > conv1, leaf
// "weight"), made on first use, so parameter names are the profile's.
torch::nn::Module& EmulatedModel::ownerOf(const std::string& tensorName, std::string& leaf) {
  torch::nn::Module* module = this;
  size_t start = 0;
  for (size_t dot = tensorName.find('.'); dot != std::string::npos;
       start = dot + 1, dot = tensorName.find('.', start)) {
    const std::string part = tensorName.substr(start, dot - start);
    if (part.empty()) {
      throw ConfigError(fmt::format("tensor name '{}' has an empty component", tensorName),
                        {.operation = "emulated compute"});
    }
    std::shared_ptr<torch::nn::Module> child;
    for (const auto& item : module->named_children()) {
      if (item.key() == part) child = item.value();
    }
    if (!child) child = module->register_module(part, std::make_shared<torch::nn::Module>());
    module = child.get();
  }
  leaf = tensorName.substr(start);
  if (leaf.empty() || module->named_parameters(/*recurse=*/false).contains(leaf)) {
    throw ConfigError(fmt::format("tensor name '{}' is empty or repeated", tensorName),
                      {.operation = "emulated compute"});
  }
  return *module;
}

void EmulatedModel::makePool(int64_t largest, int rank) {
  const int64_t blocks = (largest + kOffsetSpan + kBlock - 1) / kBlock;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(mix(seed_ ^ mix(rank)));
  pool_ = torch::randn({blocks, kBlock}, generator);
  pool_ *= torch::exp(torch::randn({blocks, 1}, generator)) * kGradientScale;
  pool_ = pool_.flatten();
}

torch::Tensor EmulatedModel::gradientView(const EmulatedLayer& layer, size_t i) const {
  const torch::Tensor& parameter = layer.parameters[i];
  const int64_t span = pool_.numel() - parameter.numel() + 1;
  const uint64_t key =
      mix(mix(seed_ + static_cast<uint64_t>(rank_)) ^
          mix(static_cast<uint64_t>(layer.tensorIndex[i]) << 32 ^ static_cast<uint64_t>(step_)));
  const auto offset = static_cast<int64_t>(key % static_cast<uint64_t>(span));
  return pool_.narrow(0, offset, parameter.numel()).view(parameter.sizes());
}

std::vector<LinearLayer> EmulatedModel::linearLayers() {
  std::vector<LinearLayer> linear;
  for (const EmulatedLayer& layer : layers_) {
    if (!layer.linear) continue;
    const torch::Tensor bias = layer.parameters.size() > 1 ? layer.parameters[1] : torch::Tensor();
    linear.push_back({layer.owners.front(), layer.parameters.front(), bias});
  }
  return linear;
}

torch::Tensor EmulatedModel::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0);
  if (!is_training()) return torch::zeros({batch, kOutputs});
  ++step_;
  batch_ = batch;
  callbackQueued_ = false;
  // A fresh leaf that requires a gradient: every layer's node is then part of backward, also
  // the layers before the first one with parameters.
  torch::Tensor h = torch::zeros({batch, kOutputs}, torch::requires_grad());
  device_.beginStep();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const EmulatedLayer& layer = layers_[i];
    const auto start = EmulatedDevice::Clock::now();
    for (const torch::nn::Module* owner : layer.owners) beforeLayer(*owner);
    FcExchangeLayer* exchange = layer.linear ? exchangeOf(*layer.owners.front()) : nullptr;
    if (exchange) exchange->emulateForward(batch);  // sends the activations' columns
    device_.forward(layer.forwardSeconds, EmulatedDevice::Clock::now() - start);
    // An exchanged layer's gradients go to the engine through its exchange, not autograd.
    h = EmulatedLayerFunction::apply(h,
                                     exchange ? at::TensorList() : at::TensorList(layer.parameters),
                                     this, static_cast<int64_t>(i));
  }
  return h;
}

variable_list EmulatedModel::backwardLayer(size_t index, const torch::Tensor& gradient) {
  if (!callbackQueued_) {  // the step's first backward node
    callbackQueued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { afterBackward(); });
    device_.beginBackward();
  }
  const EmulatedLayer& layer = layers_[index];
  variable_list gradients{gradient};
  FcExchangeLayer* exchange = layer.linear ? exchangeOf(*layer.owners.front()) : nullptr;
  for (size_t i = 0; i < layer.parameters.size() && !exchange; ++i)
    gradients.push_back(gradientView(layer, i));
  gradients.emplace_back();  // the model pointer and the layer index are not differentiable
  gradients.emplace_back();
  device_.backward(layer.backwardSeconds);
  if (exchange) {  // the errors' allgather, then this rank's columns to the engine
    exchange->emulateBackward(
        batch_, gradientView(layer, 0),
        layer.parameters.size() > 1 ? gradientView(layer, 1) : torch::Tensor());
  }
  return gradients;
}

// Autograd has stored each gradient (a pool view) in its parameter's .grad without copying it.
// Update mode reads none of them; gradient mode needs a buffer per parameter for the averages.
void EmulatedModel::afterBackward() {
  const bool updateMode = hasPreForwardHook();  // DistributedModel hooks layers in update mode
  std::vector<torch::Tensor> all = parameters();
  if (!updateMode && grads_.empty()) {
    for (const torch::Tensor& p : all) grads_.push_back(torch::empty_like(p));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (updateMode) {
      all[i].mutable_grad().reset();
    } else {
      all[i].mutable_grad() = grads_[i];
    }
  }
}

void EmulatedModel::optimizerStep(torch::optim::Optimizer& /*optimizer*/) {
  device_.update(updateSeconds_);
  for (torch::Tensor& p : parameters()) p.mutable_grad().reset();
}

}  // namespace

std::shared_ptr<Model> makeEmulatedModel(const ModelProfile& profile, int rank, uint64_t seed) {
  return std::make_shared<EmulatedModel>(profile, rank, seed);
}

}  // namespace gradsync
