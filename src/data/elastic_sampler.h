// Which samples each rank trains on when the number of workers may change within an epoch
// (`gradsync train --elastic MIN:MAX`, docs/cluster.md "Elastic workers").
//
// An epoch is DistributedSampler's permutation (epochPermutation(size, seed, epoch)), consumed in
// order from a position every worker shares: the number of samples of the epoch used so far.
// Every step takes the next maxWorkers*B positions, whatever the number of workers W: the global
// batch does not change when workers come and go, so neither does the training (the same
// samples in the same steps, the same learning rate). Rank r of W takes the positions r, r+W,
// r+2W, ... of the step: at W = maxWorkers exactly DistributedSampler's batch, with fewer workers
// a larger share (at least B; shares of one step differ by at most one, and the trainer weights
// each rank's mean by its share, so that the average over the ranks is the step's mean). Whatever
// W is at each step, every sample of the epoch is used exactly once, and a worker that joins
// mid-epoch only needs the position.
//
// Nothing is dropped: the last step of an epoch also takes the remainder (it has fewer than
// 2*maxWorkers*B samples), where DistributedSampler drops it.
//
// Thread safety: const methods may be called concurrently; the permutation of the most recent
// epoch is cached behind a mutex, as in DistributedSampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace gradsync {

// Where an elastic run stands in its data: `offset` samples of epoch `epoch` are used.
struct EpochPosition {
  int64_t epoch = 0;
  size_t offset = 0;
  bool operator==(const EpochPosition&) const = default;
};

class ElasticSampler {
 public:
  // Throws ConfigError when localBatch or maxWorkers is 0, or the dataset is smaller than one
  // step (maxWorkers * localBatch samples).
  ElasticSampler(size_t datasetSize, size_t localBatch, int maxWorkers, uint64_t seed);

  size_t datasetSize() const { return datasetSize_; }
  size_t localBatch() const { return localBatch_; }
  size_t globalBatch() const { return globalBatch_; }  // maxWorkers * localBatch

  // The samples of the step at `at`: globalBatch(), or at an epoch's last step everything left.
  // InternalError if the epoch is used up (at.offset == datasetSize()).
  size_t stepSamples(const EpochPosition& at) const;
  // Rank `rank`'s dataset indices for the step at `at` among `worldSize` ranks (1..maxWorkers):
  // stepSamples/worldSize of them, one more for the first stepSamples % worldSize ranks.
  std::vector<size_t> batch(const EpochPosition& at, int rank, int worldSize) const;
  // The position after the step at `at` (an epoch that is used up stays at offset
  // datasetSize(): its end is the caller's to act on).
  EpochPosition after(const EpochPosition& at) const;

 private:
  size_t datasetSize_;
  size_t localBatch_;
  size_t maxWorkers_;
  size_t globalBatch_;
  uint64_t seed_;
  mutable std::mutex mutex_;  // guards the cache
  mutable int64_t cachedEpoch_ = 0;
  mutable std::shared_ptr<const std::vector<size_t>> cached_;
};

}  // namespace gradsync
