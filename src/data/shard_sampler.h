// Training on a sharded remote dataset (data/shard_cache.h): which shards each rank owns, and
// the order it trains their samples in.
//
// Rank r of W owns the training shards i with i % W == r, so each host fetches and caches only
// its ranks' partition, never a shard another host uses. Every epoch the rank shuffles its own
// shards' order, cuts it into windows of `windowShards` consecutive shards and shuffles the
// samples within each window: a batch touches at most two windows, so epoch 1 can stream (the
// prefetcher loads the next window while this one trains) instead of waiting for the whole
// partition, and every epoch still visits each owned sample once in a fresh order. The order
// depends only on (seed, rank, epoch, the manifest), never on what is cached.
//
// Unlike DistributedSampler, a run on W ranks does not see the data of a run on one (the
// partition is per rank, as in Shi et al.'s per-node caches). Every rank runs the same number of
// steps: the smallest partition's samples / localBatch; the larger partitions' surplus samples
// of an epoch are the last ones of their order, and are dropped.
//
// Thread-safe: const methods; the most recent epoch's order is cached behind a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "data/shard_format.h"

namespace gradsync {

// The training shards rank `rank` of `world` owns, and where each of its samples lies.
struct ShardPartition {
  std::vector<size_t> shards;        // indices into the manifest's train list, ascending
  std::vector<int64_t> firstSample;  // running sample count before each owned shard
  int64_t samples = 0;

  static ShardPartition of(const std::vector<ShardInfo>& train, int rank, int world);
  size_t samplesOf(size_t position) const;  // of the owned shard at `position` in `shards`
  // (position in `shards`, sample within that shard) of partition sample `index` (< samples).
  std::pair<size_t, int64_t> locate(size_t index) const;
};

class ShardSampler final : public BatchSampler {
 public:
  // ConfigError when a rank would own no shard (more ranks than shards: use smaller shards) or
  // the smallest partition is smaller than one local batch.
  ShardSampler(const std::vector<ShardInfo>& train, int rank, int world, size_t localBatch,
               uint64_t seed, size_t windowShards = 4);
  ~ShardSampler() override;

  size_t stepsPerEpoch() const override { return steps_; }
  size_t globalBatch() const override { return localBatch_ * static_cast<size_t>(world_); }
  // Indices into this rank's partition (ShardPartition::locate maps them to shards).
  std::vector<size_t> batch(int64_t epoch, size_t step) const override;

  const ShardPartition& partition() const { return partition_; }
  // Positions in partition().shards in the order `epoch` first uses them (the prefetch order).
  std::vector<size_t> shardOrder(int64_t epoch) const;
  // The full order of partition samples of `epoch` (the reference batch() slices).
  std::vector<size_t> epochOrder(int64_t epoch) const;

 private:
  struct Cache;
  ShardPartition partition_;
  int rank_;
  int world_;
  size_t localBatch_;
  uint64_t seed_;
  size_t windowShards_;
  size_t steps_ = 0;
  std::unique_ptr<Cache> cache_;
};

}  // namespace gradsync
