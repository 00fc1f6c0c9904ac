#include "torch/api/outer_optimizer.h"

#include <fmt/format.h>

#include <numeric>

#include "common/check.h"
#include "common/state_bytes.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "sync/fragments.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

const CollectiveOptions kOuterTag{.tag = tags::kOuterStep};

}  // namespace

OuterOptimizer::OuterOptimizer(OuterOptions options, int period,
                               PseudoGradientCompression compression)
    : options_(options), period_(period), compression_(std::move(compression)) {}

OuterOptimizer::~OuterOptimizer() {
  if (inFlight_.thread.joinable()) inFlight_.thread.join();
}

bool OuterOptimizer::averages() const {
  return options_.averagesModels() && !options_.int8 && !options_.streams() &&
         compression_.spec.dense();
}

void OuterOptimizer::begin(const std::vector<torch::Tensor>& parameters) {
  if (started()) return;
  checkFragmentsFit(options_.fragments, parameters.size());
  torch::NoGradGuard noGrad;
  assignFragments(parameters);
  makeCompressors(parameters);
  for (const torch::Tensor& p : parameters) global_.push_back(p.detach().clone());
  if (options_.momentum > 0) {
    for (const torch::Tensor& p : parameters) momentum_.push_back(torch::zeros_like(p));
  }
}

void OuterOptimizer::assignFragments(const std::vector<torch::Tensor>& parameters) {
  std::vector<int64_t> elements;
  for (const torch::Tensor& p : parameters) elements.push_back(p.numel());
  fragmentOf_ = gradsync::assignFragments(elements, options_.fragments);
}

bool OuterOptimizer::settlesAfter(int64_t step) const {
  return outerStateSettlesAfter(step, period_, options_.fragments, options_.delay, options_.eager);
}

std::vector<size_t> OuterOptimizer::tensorsOf(int fragment) const {
  std::vector<size_t> mine;
  for (size_t i = 0; i < fragmentOf_.size(); ++i) {
    if (fragmentOf_[i] == fragment) mine.push_back(i);
  }
  return mine;
}

uint64_t OuterOptimizer::afterLocalStep(int64_t step, std::vector<torch::Tensor>& parameters,
                                        Transport& transport) {
  if (!options_.streams()) return step % period_ == 0 ? syncAll(parameters, transport, false) : 0;
  torch::NoGradGuard noGrad;
  uint64_t bytes = 0;
  if (inFlight_.fragment >= 0 && step >= inFlight_.mergeAt) bytes += merge(parameters);
  if (const int fragment = fragmentSyncedAfter(step, period_, options_.fragments); fragment >= 0) {
    launch(fragment, step, parameters, transport);
    if (options_.delay == 0) bytes += merge(parameters);
  }
  return bytes;
}

uint64_t OuterOptimizer::step(std::vector<torch::Tensor>& parameters, Transport& transport) {
  torch::NoGradGuard noGrad;
  const uint64_t merged = inFlight_.fragment >= 0 ? merge(parameters) : 0;
  return merged + syncAll(parameters, transport, true);
}

uint64_t OuterOptimizer::syncAll(std::vector<torch::Tensor>& parameters, Transport& transport,
                                 bool adopt) {
  torch::NoGradGuard noGrad;
  const uint64_t before = transport.bytesSent();
  if (averages()) {  // the models themselves, in one all-reduce
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& p : parameters) flat.push_back(p.reshape(-1));
    torch::Tensor all = torch::cat(flat);
    allreduce(transport, floatSpan(all), ReduceOp::kAverage, kOuterTag);
    int64_t offset = 0;
    for (torch::Tensor& p : parameters) {
      p.copy_(all.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
    return transport.bytesSent() - before;
  }
  GS_CHECK(global_.size() == parameters.size());
  ++exchanges_;
  std::vector<size_t> every(parameters.size());
  std::iota(every.begin(), every.end(), size_t{0});
  PseudoGradients deltas = pseudoGradients(every, parameters, transport.size());
  reduce(every, deltas, transport);
  for (size_t i = 0; i < parameters.size(); ++i)
    applyOuter(i, deltas.byTensor[i], parameters[i], adopt);
  return transport.bytesSent() - before;
}

// The dense ones as views of one buffer, each computed in place (no copy of the model beyond the
// pseudo-gradients themselves); the compressed ones as tensors of their own. For the int8 ring,
// each dense tensor starts on a chunk boundary and the buffer is padded with zeros to a multiple
// of `ranks` chunks, so that the ring's blocks, and the chunks it scales from each block's
// start, keep every chunk inside one tensor: a bias never shares a scale with a weight matrix
// (which made the int8 drift twice as large when tensors shared chunks).
OuterOptimizer::PseudoGradients OuterOptimizer::pseudoGradients(
    const std::vector<size_t>& tensors, const std::vector<torch::Tensor>& parameters,
    int ranks) const {
  GS_CHECK(!tensors.empty());  // begin() refused fragments without tensors
  const auto compressed = [&](size_t i) { return i < compressors_.size() && compressors_[i]; };
  std::vector<int64_t> dense;
  for (size_t i : tensors) dense.push_back(compressed(i) ? 0 : parameters[i].numel());
  const FusedLayout layout =
      fusedLayout(dense, options_.int8 ? static_cast<int64_t>(kInt8ChunkElements) : 1, ranks);
  const torch::TensorOptions float32 = parameters[tensors.front()].options();
  PseudoGradients deltas;
  deltas.dense = options_.int8 ? torch::zeros({layout.elements}, float32)
                               : torch::empty({layout.elements}, float32);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const torch::Tensor& parameter = parameters[tensors[k]];
    torch::Tensor delta =
        compressed(tensors[k])
            ? torch::empty_like(parameter)
            : deltas.dense.narrow(0, layout.offsets[k], parameter.numel()).view_as(parameter);
    torch::sub_out(delta, global_[tensors[k]], parameter);
    deltas.byTensor.push_back(std::move(delta));
  }
  return deltas;
}

void OuterOptimizer::reduce(const std::vector<size_t>& tensors, PseudoGradients& deltas,
                            Transport& transport) {
  for (size_t k = 0; k < tensors.size(); ++k) {
    const size_t i = tensors[k];
    if (i >= compressors_.size() || !compressors_[i]) continue;
    ExchangeContext context{.transport = transport,
                            .collective = kOuterTag,
                            .step = exchanges_,
                            .seed = compression_.seed};
    std::vector<float> sent(static_cast<size_t>(deltas.byTensor[k].numel()));
    ExchangeStats stats;
    compressors_[i]->exchange(context, floatSpan(deltas.byTensor[k]), sent, stats);
  }
  if (deltas.dense.numel() == 0) return;
  if (options_.int8) {
    allreduceInt8(transport, floatSpan(deltas.dense), ReduceOp::kAverage, kOuterTag);
  } else {
    allreduce(transport, floatSpan(deltas.dense), ReduceOp::kAverage, kOuterTag);
  }
}

void OuterOptimizer::makeCompressors(const std::vector<torch::Tensor>& parameters) {
  compressors_.clear();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto elements = static_cast<size_t>(parameters[i].numel());
    if (compression_.spec.dense() || elements < compression_.minElements) {
      compressors_.push_back(nullptr);
      continue;
    }
    const TensorShape shape =
        tensorShape(fmt::format("parameter {}", i), parameters[i].sizes().vec());
    compressors_.push_back(makeCompressor(compression_.spec, std::span(&shape, 1)));
  }
}

void OuterOptimizer::applyOuter(size_t i, const torch::Tensor& delta, torch::Tensor& parameter,
                                bool adopt, const torch::Tensor* launchedFrom) {
  torch::Tensor update = delta;
  if (options_.momentum > 0) {
    momentum_[i].mul_(options_.momentum).add_(delta);
    update = options_.nesterov ? delta + options_.momentum * momentum_[i] : momentum_[i];
  }
  global_[i].sub_(update, options_.lr);
  if (launchedFrom != nullptr && !adopt) {
    parameter.sub_(*launchedFrom).add_(global_[i]);
  } else if (adopt || options_.alpha == 0) {
    parameter.copy_(global_[i]);
  } else {
    parameter.mul_(options_.alpha).add_(global_[i], 1 - options_.alpha);
  }
}

void OuterOptimizer::launch(int fragment, int64_t step,
                            const std::vector<torch::Tensor>& parameters, Transport& transport) {
  GS_CHECK(inFlight_.fragment < 0);
  inFlight_.fragment = fragment;
  inFlight_.mergeAt = step + options_.delay;
  ++exchanges_;
  const std::vector<size_t> tensors = tensorsOf(fragment);
  inFlight_.deltas = pseudoGradients(tensors, parameters, transport.size());
  inFlight_.launchedFrom.clear();
  if (options_.eager) {
    for (size_t i : tensors) inFlight_.launchedFrom.push_back(parameters[i].clone());
  }
  auto exchange = [this, &transport, tensors] {
    const uint64_t before = transport.bytesSent();
    reduce(tensors, inFlight_.deltas, transport);
    inFlight_.bytes = transport.bytesSent() - before;
  };
  if (options_.delay == 0) return exchange();
  // The all-reduce overlaps the next τ local steps. It touches only the copies in inFlight_
  // (and counts bytes while those steps send nothing of their own).
  inFlight_.thread = std::thread([this, exchange] {
    try {
      exchange();
    } catch (...) {
      inFlight_.error = std::current_exception();
    }
  });
}

void OuterOptimizer::finishAllreduce() {
  if (inFlight_.thread.joinable()) inFlight_.thread.join();
  if (inFlight_.error) std::rethrow_exception(std::exchange(inFlight_.error, nullptr));
}

uint64_t OuterOptimizer::merge(std::vector<torch::Tensor>& parameters) {
  finishAllreduce();
  const std::vector<size_t> tensors = tensorsOf(inFlight_.fragment);
  for (size_t k = 0; k < tensors.size(); ++k) {
    applyOuter(tensors[k], inFlight_.deltas.byTensor[k], parameters[tensors[k]], false,
               options_.eager ? &inFlight_.launchedFrom[k] : nullptr);
  }
  const uint64_t bytes = inFlight_.bytes;
  inFlight_.fragment = -1;
  inFlight_.deltas = {};
  inFlight_.launchedFrom.clear();
  inFlight_.bytes = 0;
  return bytes;
}

std::vector<uint8_t> OuterOptimizer::saveState() {
  finishAllreduce();  // its result is the same bits whenever it is taken
  StateWriter out;
  for (const auto* tensors : {&global_, &momentum_, &inFlight_.deltas.byTensor}) {
    out.write(static_cast<uint64_t>(tensors->size()));
    for (const torch::Tensor& t : *tensors) {
      out.write(std::span<const float>(floatSpan(t)));
    }
  }
  if (options_.eager) {  // the local tensors at the launch, beside the deltas
    for (const torch::Tensor& t : inFlight_.launchedFrom) {
      out.write(std::span<const float>(floatSpan(t)));
    }
  }
  out.write(static_cast<uint64_t>(inFlight_.fragment + 1));
  out.write(static_cast<uint64_t>(inFlight_.mergeAt));
  out.write(exchanges_);
  for (const auto& compressor : compressors_) {
    if (compressor) compressor->saveState(out);  // error feedback's residual, PowerSGD's Q, ...
  }
  return out.take();
}

const std::vector<torch::Tensor>& OuterOptimizer::settledParameters(
    const std::vector<torch::Tensor>& parameters) const {
  if (inFlight_.fragment >= 0) {
    throw ConfigError(fmt::format("fragment {}'s outer update is in flight: the outer state is "
                                  "not settled",
                                  inFlight_.fragment),
                      {.hint = "take it after a fragment's merge, with nothing in flight "
                               "(eager=on always has one)"});
  }
  return global_.empty() ? parameters : global_;
}

void OuterOptimizer::loadState(std::span<const uint8_t> bytes,
                               const std::vector<torch::Tensor>& parameters) {
  restoreState(bytes, parameters, /*adopt=*/false);
}

// Another rank's state describes this one only at an outer step, where every rank holds θ_global
// (its compressors' residuals stay that rank's: these start afresh).
void OuterOptimizer::adoptState(std::span<const uint8_t> bytes,
                                const std::vector<torch::Tensor>& parameters) {
  restoreState(bytes, parameters, /*adopt=*/true);
  const auto refuse = [](const std::string& why) {
    return ConfigError(fmt::format("the checkpoint's outer state {}: it cannot be resumed on "
                                   "another number of workers",
                                   why),
                       {.hint = "resume on the number of workers that saved it, or from a "
                                "checkpoint where every fragment had its outer step"});
  };
  if (inFlight_.fragment >= 0) throw refuse("has a fragment in flight");
  for (size_t i = 0; i < global_.size(); ++i) {
    if (!torch::equal(global_[i], parameters[i])) throw refuse("was saved between outer steps");
  }
}

void OuterOptimizer::restoreState(std::span<const uint8_t> bytes,
                                  const std::vector<torch::Tensor>& parameters, bool adopt) {
  StateReader in(bytes, "the outer optimizer's state");
  auto mismatch = [] {
    return DataError("the outer optimizer's state does not match this model",
                     {.hint = "resume with the model and --sync that wrote the checkpoint"});
  };
  if (inFlight_.thread.joinable()) inFlight_.thread.join();
  for (auto* tensors : {&global_, &momentum_}) {
    const uint64_t count = in.readU64();
    if (count != 0 && count != parameters.size()) throw mismatch();
    tensors->clear();
    for (uint64_t i = 0; i < count; ++i) {
      tensors->push_back(torch::empty_like(parameters[i]));
      in.readExact(floatSpan(tensors->back()));
    }
  }
  // The fragment in flight, its all-reduce done: shaped as its tensors once the number is read.
  std::vector<std::vector<float>> deltas(in.readU64());
  for (std::vector<float>& d : deltas) in.read(d);
  std::vector<std::vector<float>> launchedFrom(options_.eager ? deltas.size() : 0);
  for (std::vector<float>& l : launchedFrom) in.read(l);
  inFlight_.fragment = static_cast<int>(in.readU64()) - 1;
  inFlight_.mergeAt = static_cast<int64_t>(in.readU64());
  exchanges_ = in.readU64();
  makeCompressors(parameters);
  if (!adopt) {  // adopted: the compressors start afresh, the rest of the bytes stay unread
    for (const auto& compressor : compressors_) {
      if (compressor) compressor->loadState(in);
    }
    in.expectEnd();
  }
  assignFragments(parameters);
  inFlight_.deltas = {};
  inFlight_.launchedFrom.clear();
  if (inFlight_.fragment < 0) return;
  const std::vector<size_t> tensors = tensorsOf(inFlight_.fragment);
  if (inFlight_.fragment >= options_.fragments || tensors.size() != deltas.size()) throw mismatch();
  const auto restore = [&](const std::vector<float>& values, size_t k,
                           std::vector<torch::Tensor>& into) {
    if (static_cast<int64_t>(values.size()) != parameters[tensors[k]].numel()) throw mismatch();
    into.push_back(torch::empty_like(parameters[tensors[k]]));
    std::copy(values.begin(), values.end(), floatSpan(into.back()).begin());
  };
  for (size_t k = 0; k < tensors.size(); ++k) {
    restore(deltas[k], k, inFlight_.deltas.byTensor);
    if (options_.eager) restore(launchedFrom[k], k, inFlight_.launchedFrom);
  }
}

}  // namespace gradsync
