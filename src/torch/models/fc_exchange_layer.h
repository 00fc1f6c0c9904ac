// A fully-connected layer of a gradsync Model running through sharded's FC exchange
// (sync/fc_exchange.h, --sync sharded:fc=exchange|auto). DistributedModel makes one per exchanged
// layer and hands it to the model (Model::setExchange); the model's run() then calls forward()
// instead of the layer's own forward, and emulated compute calls the emulate methods.
//
// The weight and bias are not inputs of autograd's graph there: backward computes this rank's
// columns of the weight's gradient over the global batch and puts them, and the bias's local
// gradient, in the engine's slots itself (so the parameters' autograd hooks never fire).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace gradsync {

class Engine;
class Transport;

class FcExchangeLayer {
 public:
  virtual ~FcExchangeLayer() = default;
  // y = x W^T + b for x of rows x in, differentiable in x; backward exchanges (blocking).
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // Emulated compute: the exchange's real traffic for `rows` rows of placeholder activations
  // (forward) and errors (backward); backward hands this rank's columns of `weightGradient` (out
  // x in) and all of `biasGradient` (may be undefined) to the engine as the layer's gradients.
  virtual void emulateForward(int64_t rows) = 0;
  virtual void emulateBackward(int64_t rows, const torch::Tensor& weightGradient,
                               const torch::Tensor& biasGradient) = 0;
  // What the exchanges sent, and how long the training thread waited for them, so far.
  virtual uint64_t bytesSent() const = 0;
  virtual double waitSeconds() const = 0;
};

// The exchange of one linear layer whose weight (out x in) is the engine's tensor `weightIndex`
// and bias tensor `biasIndex` (-1: none), over `transport` (the engine's workers) on the streams
// at `tag`. `weight` and `bias` are the layer's parameters (read in forward and backward).
std::shared_ptr<FcExchangeLayer> makeFcExchangeLayer(Transport& transport, uint64_t tag,
                                                     Engine& engine, int weightIndex, int biasIndex,
                                                     torch::Tensor weight, torch::Tensor bias);

}  // namespace gradsync
