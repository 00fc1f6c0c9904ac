#include "torch/loop/remote_data_source.h"

#include <atomic>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "data/shard_sampler.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

class RemoteDataSource final : public DataSource {
 public:
  explicit RemoteDataSource(const ShardCacheOptions& options)
      : cache_(options), test_(ShardPartition::of(cache_.manifest().test, 0, 1)) {}

  ~RemoteDataSource() override {
    stop_ = true;
    if (prefetcher_.joinable()) prefetcher_.join();
  }

  size_t trainSize() const override { return static_cast<size_t>(train_.samples); }
  size_t testSize() const override { return static_cast<size_t>(test_.samples); }
  size_t sampleElements() const override {
    return static_cast<size_t>(cache_.manifest().rows) *
           static_cast<size_t>(cache_.manifest().cols);
  }

  void batch(bool train, std::span<const size_t> indices, std::span<float> inputs,
             std::span<int64_t> labels) const override {
    GS_CHECK(!train || !train_.shards.empty());  // makeSampler() first
    const ShardPartition& part = train ? train_ : test_;
    const std::vector<ShardInfo>& shards = train ? cache_.manifest().train : cache_.manifest().test;
    const size_t elements = sampleElements();
    std::map<size_t, std::shared_ptr<const ImageSet>> loaded;  // one get() per shard and batch
    for (size_t i = 0; i < indices.size(); ++i) {
      auto [position, offset] = part.locate(indices[i]);
      std::shared_ptr<const ImageSet>& set = loaded[position];
      if (!set) set = cache_.get(shards[part.shards[position]]);
      const size_t one[] = {static_cast<size_t>(offset)};
      gatherBatch(*set, one, Normalization{}, inputs.subspan(i * elements, elements),
                  labels.subspan(i, 1));
    }
  }

  std::unique_ptr<BatchSampler> makeSampler(int rank, int world, size_t localBatch, uint64_t seed,
                                            int batchWorkers) override {
    GS_CHECK(train_.shards.empty());  // once
    if (batchWorkers != world) {
      throw ConfigError(
          fmt::format("a --data-url run partitions its shards among its {} workers: its "
                      "checkpoint cannot be resumed on {}",
                      batchWorkers, world),
          {.hint = fmt::format("resume it with --workers {}", batchWorkers)});
    }
    auto sampler =
        std::make_unique<ShardSampler>(cache_.manifest().train, rank, world, localBatch, seed);
    train_ = sampler->partition();
    std::vector<ShardInfo> order;
    for (size_t position : sampler->shardOrder(0)) {
      order.push_back(cache_.manifest().train[train_.shards[position]]);
    }
    prefetcher_ = std::thread([this, order = std::move(order)] { prefetch(order); });
    return sampler;
  }

  std::optional<ShardCacheStats> cacheStats() const override { return cache_.stats(); }

 private:
  // Loads every shard of the partition once, in first-use order. A failure is left to the
  // training thread, whose own get() of that shard fails with the error naming it.
  void prefetch(const std::vector<ShardInfo>& order) {
    for (const ShardInfo& shard : order) {
      if (stop_) return;
      try {
        cache_.get(shard);
      } catch (const Error& e) {
        GS_LOG(kDebug, "prefetch stopped: {}", e.what());
        return;
      }
    }
  }

  mutable ShardCache cache_;
  ShardPartition train_;  // set by makeSampler()
  const ShardPartition test_;
  std::atomic<bool> stop_{false};
  std::thread prefetcher_;
};

}  // namespace

std::unique_ptr<DataSource> openRemoteDataSource(const ShardCacheOptions& options) {
  return std::make_unique<RemoteDataSource>(options);
}

}  // namespace gradsync
