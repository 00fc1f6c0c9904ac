#include "data/sampler.h"

#include <fmt/format.h>

#include <mutex>
#include <numeric>
#include <utility>

#include "common/check.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {

std::vector<size_t> epochPermutation(size_t size, uint64_t seed, int64_t epoch) {
  std::vector<size_t> perm(size);
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::mt19937_64 engine(rng::mixSeed(seed, static_cast<uint64_t>(epoch)));
  // Fisher-Yates from the back: position i takes a uniform pick among positions [0, i].
  for (size_t i = size; i > 1; --i) {
    const size_t j = static_cast<size_t>(rng::uniformBelow(engine, i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

struct DistributedSampler::Cache {
  std::mutex mutex;
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<size_t>> permutation;  // null until the first batch()
};

DistributedSampler::DistributedSampler(size_t datasetSize, int rank, int worldSize,
                                       size_t localBatch, uint64_t seed, int batchWorkers)
    : datasetSize_(datasetSize),
      rank_(rank),
      worldSize_(worldSize),
      localBatch_(localBatch),
      batchWorkers_(batchWorkers > 0 ? batchWorkers : worldSize),
      seed_(seed),
      steps_(0),
      cache_(std::make_unique<Cache>()) {
  const ErrorContext context{.rank = rank >= 0 ? rank : -1, .operation = "distributed sampler"};
  if (localBatch == 0) throw ConfigError("the local batch size must be at least 1", context);
  if (worldSize < 1) {
    throw ConfigError(fmt::format("the world size must be at least 1, got {}", worldSize), context);
  }
  if (rank < 0 || rank >= worldSize) {
    throw ConfigError(fmt::format("rank {} is outside [0, {})", rank, worldSize), context);
  }
  const size_t batches = static_cast<size_t>(batchWorkers_);
  if (localBatch > datasetSize / batches) {  // also rules out batches * localBatch overflowing
    ErrorContext withHint = context;
    withHint.hint = "use a smaller batch size or fewer ranks";
    throw ConfigError(fmt::format("the dataset has {} samples, fewer than one global batch of "
                                  "{} ranks x {} samples",
                                  datasetSize, batchWorkers_, localBatch),
                      withHint);
  }
  if (globalBatch() < static_cast<size_t>(worldSize)) {
    throw ConfigError(fmt::format("a global batch of {} samples cannot give each of {} ranks one",
                                  globalBatch(), worldSize),
                      context);
  }
  steps_ = datasetSize / globalBatch();
}

DistributedSampler::DistributedSampler(DistributedSampler&&) noexcept = default;
DistributedSampler& DistributedSampler::operator=(DistributedSampler&&) noexcept = default;
DistributedSampler::~DistributedSampler() = default;

std::shared_ptr<const std::vector<size_t>> DistributedSampler::permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (!cache_->permutation || cache_->epoch != epoch) {
    // Built under the lock: concurrent callers of a new epoch wait instead of each building it.
    cache_->permutation =
        std::make_shared<const std::vector<size_t>>(epochPermutation(datasetSize_, seed_, epoch));
    cache_->epoch = epoch;
  }
  return cache_->permutation;  // shared: stays valid if another thread switches epochs
}

std::vector<size_t> DistributedSampler::batch(int64_t epoch, size_t step) const {
  GS_CHECK_LT(step, steps_);
  const auto perm = permutation(epoch);
  const size_t world = static_cast<size_t>(worldSize_);
  const size_t rank = static_cast<size_t>(rank_);
  const size_t share = globalBatch() / world + (rank < globalBatch() % world ? 1 : 0);
  const size_t begin = step * globalBatch() + rank;
  std::vector<size_t> out(share);
  for (size_t i = 0; i < share; ++i) out[i] = (*perm)[begin + i * world];
  return out;
}

}  // namespace gradsync
