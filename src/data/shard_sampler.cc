#include "data/shard_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <span>

#include "common/check.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Fisher-Yates with the portable bounded draw (common/random.h), as epochPermutation does.
void shuffle(std::span<size_t> items, std::mt19937_64& engine) {
  for (size_t i = items.size(); i > 1; --i) {
    std::swap(items[i - 1], items[static_cast<size_t>(rng::uniformBelow(engine, i))]);
  }
}

}  // namespace

ShardPartition ShardPartition::of(const std::vector<ShardInfo>& train, int rank, int world) {
  ShardPartition p;
  for (size_t i = static_cast<size_t>(rank); i < train.size(); i += static_cast<size_t>(world)) {
    p.shards.push_back(i);
    p.firstSample.push_back(p.samples);
    p.samples += train[i].samples;
  }
  return p;
}

size_t ShardPartition::samplesOf(size_t position) const {
  const int64_t end = position + 1 < firstSample.size() ? firstSample[position + 1] : samples;
  return static_cast<size_t>(end - firstSample[position]);
}

std::pair<size_t, int64_t> ShardPartition::locate(size_t index) const {
  GS_CHECK_LT(static_cast<int64_t>(index), samples);
  auto next = std::upper_bound(firstSample.begin(), firstSample.end(), static_cast<int64_t>(index));
  const auto position = static_cast<size_t>(next - firstSample.begin() - 1);
  return {position, static_cast<int64_t>(index) - firstSample[position]};
}

struct ShardSampler::Cache {
  std::mutex mutex;
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<size_t>> order;  // null until the first batch()
};

ShardSampler::ShardSampler(const std::vector<ShardInfo>& train, int rank, int world,
                           size_t localBatch, uint64_t seed, size_t windowShards)
    : partition_(ShardPartition::of(train, rank, world)),
      rank_(rank),
      world_(world),
      localBatch_(localBatch),
      seed_(seed),
      windowShards_(std::max<size_t>(1, windowShards)),
      cache_(std::make_unique<Cache>()) {
  const ErrorContext context{.rank = rank, .operation = "shard sampler"};
  if (localBatch == 0) throw ConfigError("the local batch size must be at least 1", context);
  if (world < 1 || rank < 0 || rank >= world) {
    throw ConfigError(fmt::format("rank {} is outside [0, {})", rank, world), context);
  }
  if (train.size() < static_cast<size_t>(world)) {
    throw ConfigError(fmt::format("the dataset has {} training shards, fewer than the {} ranks",
                                  train.size(), world),
                      {.rank = rank,
                       .operation = "shard sampler",
                       .hint = "write smaller shards (gradsync shard --samples-per-shard)"});
  }
  int64_t smallest = partition_.samples;
  for (int r = 0; r < world; ++r)
    smallest = std::min(smallest, ShardPartition::of(train, r, world).samples);
  steps_ = static_cast<size_t>(smallest) / localBatch;
  if (steps_ == 0) {
    throw ConfigError(fmt::format("the smallest rank's partition has {} samples, fewer than one "
                                  "local batch of {}",
                                  smallest, localBatch),
                      {.rank = rank, .operation = "shard sampler", .hint = "use a smaller batch"});
  }
}

ShardSampler::~ShardSampler() = default;

std::vector<size_t> ShardSampler::shardOrder(int64_t epoch) const {
  std::vector<size_t> order(partition_.shards.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 engine(rng::mixSeed(rng::mixSeed(seed_, static_cast<uint64_t>(rank_)),
                                      static_cast<uint64_t>(epoch)));
  shuffle(order, engine);
  return order;
}

std::vector<size_t> ShardSampler::epochOrder(int64_t epoch) const {
  const std::vector<size_t> shards = shardOrder(epoch);
  std::mt19937_64 engine(rng::mixSeed(rng::mixSeed(seed_ ^ 0x5A4D, static_cast<uint64_t>(rank_)),
                                      static_cast<uint64_t>(epoch)));
  std::vector<size_t> order;
  order.reserve(static_cast<size_t>(partition_.samples));
  for (size_t w = 0; w < shards.size(); w += windowShards_) {
    const size_t windowStart = order.size();
    for (size_t k = w; k < std::min(shards.size(), w + windowShards_); ++k) {
      const auto first = static_cast<size_t>(partition_.firstSample[shards[k]]);
      for (size_t i = 0; i < partition_.samplesOf(shards[k]); ++i) order.push_back(first + i);
    }
    shuffle(std::span(order).subspan(windowStart), engine);
  }
  return order;
}

std::vector<size_t> ShardSampler::batch(int64_t epoch, size_t step) const {
  GS_CHECK_LT(step, steps_);
  std::shared_ptr<const std::vector<size_t>> order;
  {
    std::lock_guard lock(cache_->mutex);
    if (!cache_->order || cache_->epoch != epoch) {
      cache_->order = std::make_shared<const std::vector<size_t>>(epochOrder(epoch));
      cache_->epoch = epoch;
    }
    order = cache_->order;
  }
  auto begin = order->begin() + static_cast<ptrdiff_t>(step * localBatch_);
  return {begin, begin + static_cast<ptrdiff_t>(localBatch_)};
}

}  // namespace gradsync
