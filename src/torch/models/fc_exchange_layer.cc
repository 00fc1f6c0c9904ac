#include "torch/models/fc_exchange_layer.h"

#include "common/check.h"
#include "sync/engine.h"
#include "sync/fc_exchange.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ExchangedLinear final : public FcExchangeLayer {
 public:
  ExchangedLinear(Transport& transport, uint64_t tag, Engine& engine, int weightIndex,
                  int biasIndex, torch::Tensor weight, torch::Tensor bias)
      : exchange_(transport, tag, static_cast<size_t>(weight.size(1)),
                  static_cast<size_t>(weight.size(0))),
        ranks_(transport.size()),
        engine_(engine),
        weightIndex_(weightIndex),
        biasIndex_(biasIndex),
        weight_(std::move(weight)),
        bias_(std::move(bias)) {}

  torch::Tensor forward(const torch::Tensor& x) override;
  void emulateForward(int64_t rows) override;
  void emulateBackward(int64_t rows, const torch::Tensor& weightGradient,
                       const torch::Tensor& biasGradient) override;
  uint64_t bytesSent() const override { return exchange_.bytesSent(); }
  double waitSeconds() const override { return exchange_.waitSeconds(); }

  // The autograd node's two halves; backward returns x's gradient when `inputGradient`.
  torch::Tensor computeForward(const torch::Tensor& x);
  torch::Tensor computeBackward(const torch::Tensor& delta, bool inputGradient);
  // A leaf that requires a gradient, an input of every step's node: the node must be part of
  // backward even when x requires none (the first layer's input is data).
  const torch::Tensor& anchor() const { return anchor_; }

 private:
  // This rank's columns of the weight's gradient over every rank's batch, (1/P) E^T X_own, and
  // the bias's local gradient, into the engine's slots.
  void handOver(const torch::Tensor& delta, const torch::Tensor& biasGradient);
  void giveToEngine(const torch::Tensor& ownColumns, const torch::Tensor& biasGradient);

  FcExchange exchange_;
  const int ranks_;
  Engine& engine_;
  const int weightIndex_;
  const int biasIndex_;  // -1: no bias
  torch::Tensor weight_;
  torch::Tensor bias_;
  int64_t rows_ = 0;
  std::vector<float> placeholder_;  // emulated compute's activations and errors
  torch::Tensor anchor_ = torch::zeros({1}, torch::requires_grad());
};

// x -> x W^T + b, whose backward runs the exchange; W and b are constants of the graph (their
// gradients go to the engine directly, so their own autograd hooks never fire).
struct ExchangedLinearFunction : public torch::autograd::Function<ExchangedLinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& /*anchor*/, ExchangedLinear* layer) {
    ctx->saved_data["layer"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(layer));
    return layer->computeForward(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list outputs) {
    auto* layer =
        reinterpret_cast<ExchangedLinear*>(static_cast<intptr_t>(ctx->saved_data["layer"].toInt()));
    // x's gradient, none for the anchor (its accumulator skips an undefined one), the layer.
    return {layer->computeBackward(outputs[0], ctx->needs_input_grad(0)), torch::Tensor(),
            torch::Tensor()};
  }
};

torch::Tensor ExchangedLinear::forward(const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled()) {  // evaluation: no backward will follow, nothing to send
    return bias_.defined() ? torch::addmm(bias_, x, weight_.t()) : x.mm(weight_.t());
  }
  return ExchangedLinearFunction::apply(x, anchor_, this);
}

torch::Tensor ExchangedLinear::computeForward(const torch::Tensor& x) {
  GS_CHECK(x.dim() == 2 && x.size(1) == weight_.size(1));
  const torch::Tensor input = x.contiguous();
  rows_ = input.size(0);
  exchange_.startActivations(floatSpan(input), static_cast<size_t>(rows_));
  const torch::Tensor w = weight_.detach();
  return bias_.defined() ? torch::addmm(bias_.detach(), input, w.t()) : input.mm(w.t());
}

torch::Tensor ExchangedLinear::computeBackward(const torch::Tensor& delta, bool inputGradient) {
  const torch::Tensor errors = delta.contiguous();
  // The local input's gradient (the whole W is in place: the allgather of the last update).
  torch::Tensor input = inputGradient ? errors.mm(weight_.detach()) : torch::Tensor();
  handOver(errors, bias_.defined() ? errors.sum(0) : torch::Tensor());
  return input;
}

void ExchangedLinear::handOver(const torch::Tensor& delta, const torch::Tensor& biasGradient) {
  const int64_t out = weight_.size(0);
  const auto own = static_cast<int64_t>(exchange_.ownColumns().size());
  std::span<const float> errors = exchange_.gatherErrors(floatSpan(delta));
  std::span<const float> activations = exchange_.ownActivations();
  const int64_t rows = static_cast<int64_t>(errors.size()) / out;
  torch::NoGradGuard noGrad;
  torch::Tensor e = torch::from_blob(const_cast<float*>(errors.data()), {rows, out});
  torch::Tensor x = torch::from_blob(const_cast<float*>(activations.data()), {rows, own});
  giveToEngine(e.t().mm(x).mul_(1.0 / ranks_), biasGradient);
}

void ExchangedLinear::giveToEngine(const torch::Tensor& ownColumns,
                                   const torch::Tensor& biasGradient) {
  torch::NoGradGuard noGrad;
  const Block own = exchange_.ownColumns();
  std::span<float> slot = engine_.slot(weightIndex_);
  torch::from_blob(slot.data(), weight_.sizes())
      .narrow(1, static_cast<int64_t>(own.begin), static_cast<int64_t>(own.size()))
      .copy_(ownColumns);
  engine_.markReady(weightIndex_);
  if (biasIndex_ < 0) return;
  std::span<float> biasSlot = engine_.slot(biasIndex_);
  GS_CHECK(biasGradient.defined() && static_cast<size_t>(biasGradient.numel()) == biasSlot.size());
  torch::from_blob(biasSlot.data(), {biasGradient.numel()}).copy_(biasGradient.flatten());
  engine_.markReady(biasIndex_);
}

void ExchangedLinear::emulateForward(int64_t rows) {
  rows_ = rows;
  placeholder_.assign(static_cast<size_t>(rows * std::max(weight_.size(0), weight_.size(1))), 0.0f);
  exchange_.startActivations(std::span<const float>(placeholder_).first(rows * weight_.size(1)),
                             static_cast<size_t>(rows));
}

void ExchangedLinear::emulateBackward(int64_t rows, const torch::Tensor& weightGradient,
                                      const torch::Tensor& biasGradient) {
  GS_CHECK(rows == rows_);
  exchange_.gatherErrors(std::span<const float>(placeholder_).first(rows * weight_.size(0)));
  exchange_.ownActivations();
  const Block own = exchange_.ownColumns();
  giveToEngine(
      weightGradient.narrow(1, static_cast<int64_t>(own.begin), static_cast<int64_t>(own.size())),
      biasGradient);
}

}  // namespace

std::shared_ptr<FcExchangeLayer> makeFcExchangeLayer(Transport& transport, uint64_t tag,
                                                     Engine& engine, int weightIndex, int biasIndex,
                                                     torch::Tensor weight, torch::Tensor bias) {
  return std::make_shared<ExchangedLinear>(transport, tag, engine, weightIndex, biasIndex,
                                           std::move(weight), std::move(bias));
}

}  // namespace gradsync
