#include "torch/api/outer_optimizer.h"

#include "common/check.h"
#include "common/state_bytes.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

const CollectiveOptions kOuterTag{.tag = tags::kModelState};

}  // namespace

void OuterOptimizer::begin(const std::vector<torch::Tensor>& parameters) {
  if (started()) return;
  torch::NoGradGuard noGrad;
  for (const torch::Tensor& p : parameters) global_.push_back(p.detach().clone());
  if (options_.momentum > 0) {
    for (const torch::Tensor& p : parameters) momentum_.push_back(torch::zeros_like(p));
  }
}

uint64_t OuterOptimizer::step(std::vector<torch::Tensor>& parameters, Transport& transport) {
  torch::NoGradGuard noGrad;
  const uint64_t before = transport.bytesSent();
  if (options_.averagesModels() && !options_.int8) {
    for (torch::Tensor& p : parameters)
      allreduce(transport, floatSpan(p), ReduceOp::kAverage, kOuterTag);
    return transport.bytesSent() - before;
  }
  GS_CHECK(global_.size() == parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    torch::Tensor delta = global_[i] - parameters[i];  // the pseudo-gradient
    if (options_.int8) {
      allreduceInt8(transport, floatSpan(delta), ReduceOp::kAverage, kOuterTag);
    } else {
      allreduce(transport, floatSpan(delta), ReduceOp::kAverage, kOuterTag);
    }
    torch::Tensor update = delta;
    if (options_.momentum > 0) {
      momentum_[i].mul_(options_.momentum).add_(delta);
      update = options_.nesterov ? delta + options_.momentum * momentum_[i] : momentum_[i];
    }
    global_[i].sub_(update, options_.lr);
    parameters[i].copy_(global_[i]);
  }
  return transport.bytesSent() - before;
}

std::vector<uint8_t> OuterOptimizer::saveState() const {
  StateWriter out;
  for (const auto* tensors : {&global_, &momentum_}) {
    out.write(static_cast<uint64_t>(tensors->size()));
    for (const torch::Tensor& t : *tensors) {
      out.write(std::span<const float>(floatSpan(t)));
    }
  }
  return out.take();
}

void OuterOptimizer::loadState(std::span<const uint8_t> bytes,
                               const std::vector<torch::Tensor>& parameters) {
  StateReader in(bytes, "the outer optimizer's state");
  for (auto* tensors : {&global_, &momentum_}) {
    const uint64_t count = in.readU64();
    if (count != 0 && count != parameters.size()) {
      throw DataError("the outer optimizer's state does not match this model",
                      {.hint = "resume with the model and --sync that wrote the checkpoint"});
    }
    tensors->clear();
    for (uint64_t i = 0; i < count; ++i) {
      tensors->push_back(torch::empty_like(parameters[i]));
      in.readExact(floatSpan(tensors->back()));
    }
  }
  in.expectEnd();
}

}  // namespace gradsync
