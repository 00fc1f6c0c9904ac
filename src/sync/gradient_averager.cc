// GradientAverager (include/gradsync/gradient_averager.h): the engine's per-tensor compression
// (compress/policy.h, each compressed tensor a unit of its own as under wfbp), driven one bucket
// at a time by the caller instead of by autograd hooks and a communication thread.
#include "gradsync/gradient_averager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring.h"
#include "common/state_bytes.h"
#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/policy.h"
#include "compress/spec.h"
#include "gradsync/clock.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr uint64_t kAveragerStateFormat = 1;  // saveState's layout

std::vector<TensorShape> shapesOf(const std::vector<GradientShape>& tensors) {
  std::vector<TensorShape> shapes;
  shapes.reserve(tensors.size());
  for (const GradientShape& t : tensors) shapes.push_back(tensorShape(t.name, t.dims));
  return shapes;
}

}  // namespace

struct GradientAverager::Impl {
  Transport& transport;
  const AveragerOptions options;
  const std::vector<TensorShape> tensors;
  const CompressionPlan plan;
  std::vector<std::unique_ptr<Compressor>> compressors;  // by tensor; null: dense
  std::vector<size_t> offsets;                           // scratch: by position in the bucket
  std::vector<float> dense;                              // scratch: the bucket's dense tensors
  std::vector<float> sent;                               // scratch for exchanges
  AveragerStats stats;

  Impl(Transport& t, std::vector<GradientShape> shapes, AveragerOptions o)
      : transport(t),
        options(std::move(o)),
        tensors(shapesOf(shapes)),
        plan(planCompression({.spec = options.compress,
                              .overrides = options.compressOverrides,
                              .minElements = options.compressMinElements,
                              .warmupSteps = options.compressWarmup},
                             tensors, options.momentum)) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      compressors.push_back(makeCompressor(plan.perTensor[i], std::span(&tensors[i], 1)));
    }
  }

  const TensorShape& tensor(int index) const {
    if (index < 0 || static_cast<size_t>(index) >= tensors.size()) {
      throw ConfigError(fmt::format("tensor index {} is not one of the averager's {} tensors",
                                    index, tensors.size()),
                        {.rank = transport.rank(), .operation = "average"});
    }
    return tensors[static_cast<size_t>(index)];
  }

  // Where each tensor starts in the bucket; checks that they fill it exactly.
  void layOut(std::span<const int> indices, size_t bucketSize) {
    offsets.clear();
    size_t at = 0;
    for (int index : indices) {
      offsets.push_back(at);
      at += tensor(index).elements;
    }
    if (at != bucketSize) {
      throw ConfigError(
          fmt::format("a bucket of {} elements cannot hold its {} tensors of {} elements",
                      bucketSize, indices.size(), at),
          {.rank = transport.rank(),
           .operation = "average",
           .hint = "pass the tensors of the bucket in the order they are laid out in it"});
    }
  }

  bool compressed(int index, uint64_t step) const {
    return compressors[static_cast<size_t>(index)] != nullptr &&
           step >= static_cast<uint64_t>(plan.warmupSteps);
  }

  // Every dense tensor of the bucket in one allreduce: gathered, averaged, scattered back.
  void averageDense(std::span<const int> indices, std::span<float> bucket, uint64_t step) {
    dense.clear();
    for (size_t k = 0; k < indices.size(); ++k) {
      if (compressed(indices[k], step)) continue;
      const float* begin = bucket.data() + offsets[k];
      dense.insert(dense.end(), begin, begin + tensor(indices[k]).elements);
    }
    if (dense.empty()) return;
    allreduce(transport, dense, ReduceOp::kAverage, {.tag = options.tag});
    size_t at = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
      if (compressed(indices[k], step)) continue;
      const size_t elements = tensor(indices[k]).elements;
      std::memcpy(bucket.data() + offsets[k], dense.data() + at, elements * sizeof(float));
      at += elements;
    }
  }

  void averageCompressed(int index, std::span<float> grad, uint64_t step) {
    sent.resize(grad.size());
    ExchangeContext context{transport, {.tag = options.tag}, step, options.seed};
    ExchangeStats exchanged;
    compressors[static_cast<size_t>(index)]->exchange(context, grad, sent, exchanged);
    stats.encodeSeconds += exchanged.encodeSeconds;
    stats.decodeSeconds += exchanged.decodeSeconds;
  }
};

GradientAverager::GradientAverager(Transport& transport, std::vector<GradientShape> tensors,
                                   AveragerOptions options)
    : impl_(std::make_unique<Impl>(transport, std::move(tensors), std::move(options))) {}

GradientAverager::~GradientAverager() = default;

void GradientAverager::average(std::span<const int> indices, std::span<float> bucket,
                               uint64_t step) {
  Impl& s = *impl_;
  s.layOut(indices, bucket.size());
  if (s.transport.size() == 1) return;  // the average of one gradient is the gradient
  const Nanos start = SteadyClock::instance().now();
  const uint64_t before = s.transport.bytesSent();
  s.averageDense(indices, bucket, step);
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!s.compressed(indices[k], step)) continue;
    s.averageCompressed(indices[k], bucket.subspan(s.offsets[k], s.tensor(indices[k]).elements),
                        step);
  }
  s.stats.bytesSent += s.transport.bytesSent() - before;
  s.stats.denseBytes += ring::allreduceBytesSent(bucket.size(), s.transport.size());
  s.stats.commSeconds += secondsSince(SteadyClock::instance(), start);
}

std::string GradientAverager::method(int index) const {
  impl_->tensor(index);  // checks the index
  return impl_->plan.perTensor[static_cast<size_t>(index)].toString();
}

AveragerStats GradientAverager::stats() const {
  return impl_->stats;
}

std::vector<uint8_t> GradientAverager::saveState() const {
  StateWriter out;
  out.write(kAveragerStateFormat);
  out.write(uint64_t{impl_->tensors.size()});
  for (const auto& compressor : impl_->compressors) {
    if (compressor) compressor->saveState(out);
  }
  return out.take();
}

void GradientAverager::loadState(std::span<const uint8_t> state) {
  StateReader in(state, fmt::format("the averager state of rank {}", impl_->transport.rank()));
  if (in.readU64() != kAveragerStateFormat) {
    throw DataError(fmt::format("{}: unknown format (written by another gradsync)", in.what()));
  }
  const uint64_t tensors = in.readU64();
  if (tensors != impl_->tensors.size()) {
    throw DataError(fmt::format("{}: {} tensors where this averager has {} (another model)",
                                in.what(), tensors, impl_->tensors.size()));
  }
  for (const auto& compressor : impl_->compressors) {
    if (compressor) compressor->loadState(in);
  }
  in.expectEnd();
}

}  // namespace gradsync
