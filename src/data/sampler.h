// Which samples each rank trains on: a distributed sampler with the semantics of PyTorch's
// DistributedSampler(drop_last=True) plus one extra guarantee, equivalence with one worker.
//
// Every epoch has one permutation of [0, datasetSize), derived only from (seed, epoch), never
// from the rank or the world size. Global batch t of the epoch is
// permutation[t*W*B, (t+1)*W*B) for W ranks of local batch B, and rank r gets the elements at
// positions r, r+W, r+2W, ... of it. Hence the W local batches of step t, interleaved
// (global[k] = local[k % W][k / W]), are exactly the batch a single worker with batch W*B gets
// at step t: a run on W ranks sees the same data in the same steps as a run on one.
//
// The final incomplete global batch is dropped, so every rank runs exactly stepsPerEpoch()
// steps; a rank with one step more would wait forever in a collective.
//
// A run resumed on another number of workers keeps its global batch (`batchWorkers` local
// batches of B: the workers of the run that began it), so that it trains the same samples in
// the same steps: rank r of W takes the positions r, r+W, r+2W, ... of the global batch, G/W
// samples or one more for the first G%W ranks (the trainer weights each rank's mean loss by its
// share, so that the average over the ranks stays the step's mean).
//
// The permutation is a Fisher-Yates shuffle driven by std::mt19937_64 (whose output the
// standard fixes) with our own unbiased bounded draw, so it is the same on every platform.
//
// Thread safety: all methods are const and may be called concurrently; the permutation of the
// most recent epoch is cached behind a mutex (built once per epoch, O(datasetSize)).
// Movable, not copyable; a moved-from sampler may only be destroyed or assigned to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gradsync {

// The permutation of [0, size) for (seed, epoch): the reference the sampler slices.
std::vector<size_t> epochPermutation(size_t size, uint64_t seed, int64_t epoch);

// What the trainer asks of a sampler: the same number of steps on every rank, and this rank's
// dataset indices for a step. Implementations are thread-safe (const methods).
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  virtual size_t stepsPerEpoch() const = 0;
  virtual size_t globalBatch() const = 0;
  // The local batch's indices (into the data source's training set) at `step` of `epoch`.
  virtual std::vector<size_t> batch(int64_t epoch, size_t step) const = 0;
};

class DistributedSampler final : public BatchSampler {
 public:
  // `batchWorkers`: local batches per global step (0: worldSize). Throws ConfigError when
  // localBatch is 0, worldSize < 1, rank is outside [0, worldSize), the dataset is smaller than
  // one global batch (batchWorkers * localBatch) or that batch has fewer samples than ranks.
  DistributedSampler(size_t datasetSize, int rank, int worldSize, size_t localBatch, uint64_t seed,
                     int batchWorkers = 0);
  DistributedSampler(DistributedSampler&&) noexcept;
  DistributedSampler& operator=(DistributedSampler&&) noexcept;
  ~DistributedSampler();

  // datasetSize / globalBatch(): the same on every rank.
  size_t stepsPerEpoch() const override { return steps_; }
  size_t globalBatch() const override { return localBatch_ * static_cast<size_t>(batchWorkers_); }
  size_t localBatch() const { return localBatch_; }  // B: a share at batchWorkers == worldSize
  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }

  // This rank's dataset indices at `step` of `epoch` (any epoch value, negative included): its
  // share of the global batch, localBatch of them when batchWorkers == worldSize. step must be
  // < stepsPerEpoch() (InternalError otherwise).
  std::vector<size_t> batch(int64_t epoch, size_t step) const override;

 private:
  struct Cache;
  std::shared_ptr<const std::vector<size_t>> permutation(int64_t epoch) const;

  size_t datasetSize_;
  int rank_;
  int worldSize_;
  size_t localBatch_;
  int batchWorkers_;
  uint64_t seed_;
  size_t steps_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace gradsync
