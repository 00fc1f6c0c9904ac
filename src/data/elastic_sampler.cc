#include "data/elastic_sampler.h"

#include <fmt/format.h>

#include "common/check.h"
#include "data/sampler.h"
#include "gradsync/error.h"

namespace gradsync {

ElasticSampler::ElasticSampler(size_t datasetSize, size_t localBatch, int maxWorkers, uint64_t seed)
    : datasetSize_(datasetSize),
      localBatch_(localBatch),
      maxWorkers_(maxWorkers > 0 ? static_cast<size_t>(maxWorkers) : 0),
      globalBatch_(maxWorkers_ * localBatch),
      seed_(seed) {
  const ErrorContext context{.operation = "elastic sampler"};
  if (localBatch == 0) throw ConfigError("the local batch size must be at least 1", context);
  if (maxWorkers_ == 0) {
    throw ConfigError(fmt::format("the most workers must be at least 1, got {}", maxWorkers),
                      context);
  }
  if (localBatch > datasetSize / maxWorkers_) {
    throw ConfigError(fmt::format("the dataset has {} samples, fewer than one step of {} "
                                  "workers x {} samples",
                                  datasetSize, maxWorkers, localBatch),
                      {.operation = context.operation,
                       .hint = "use a smaller batch size or a smaller maximum of workers"});
  }
}

size_t ElasticSampler::stepSamples(const EpochPosition& at) const {
  GS_CHECK_LT(at.offset, datasetSize_);
  const size_t left = datasetSize_ - at.offset;
  return left >= 2 * globalBatch_ ? globalBatch_ : left;  // no short step after this one
}

std::vector<size_t> ElasticSampler::batch(const EpochPosition& at, int rank, int worldSize) const {
  GS_CHECK(worldSize >= 1 && static_cast<size_t>(worldSize) <= maxWorkers_);
  GS_CHECK(rank >= 0 && rank < worldSize);
  const size_t samples = stepSamples(at);
  std::shared_ptr<const std::vector<size_t>> permutation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cached_ || cachedEpoch_ != at.epoch) {
      cached_ = std::make_shared<const std::vector<size_t>>(
          epochPermutation(datasetSize_, seed_, at.epoch));
      cachedEpoch_ = at.epoch;
    }
    permutation = cached_;
  }
  std::vector<size_t> indices;
  indices.reserve(samples / static_cast<size_t>(worldSize) + 1);
  for (size_t i = static_cast<size_t>(rank); i < samples; i += static_cast<size_t>(worldSize)) {
    indices.push_back((*permutation)[at.offset + i]);
  }
  return indices;
}

EpochPosition ElasticSampler::after(const EpochPosition& at) const {
  return {at.epoch, at.offset + stepSamples(at)};
}

}  // namespace gradsync
