// The training and test sets of a run, behind one interface: Fashion-MNIST from Debian's files,
// synthetic samples for benchmarks, or text for language models (windows of byte tokens). Torch-
// free: batches are gathered into caller-owned float and int64 buffers that the trainer wraps in
// tensors without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "data/sampler.h"
#include "data/shard_cache.h"

namespace gradsync {

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual size_t trainSize() const = 0;
  virtual size_t testSize() const = 0;
  virtual size_t sampleElements() const = 0;  // floats per sample (1 x 28 x 28; text: 0)
  // > 0: a language model's text. Each sample is a window of this many tokens (the context + 1:
  // the inputs, and shifted by one the targets), gathered into `labels`; `inputs` is unused.
  virtual size_t windowTokens() const { return 0; }
  // int64 values per sample in `labels`: the class, or a text window's tokens.
  size_t labelsPerSample() const { return windowTokens() > 0 ? windowTokens() : 1; }
  // Gathers the samples at `indices` (train or test set; text: the held-out part) into
  // inputs/labels.
  virtual void batch(bool train, std::span<const size_t> indices, std::span<float> inputs,
                     std::span<int64_t> labels) const = 0;
  // Which training indices rank `rank` of `world` trains at each step, of a global batch of
  // `batchWorkers` local batches (world, or another run's on a resume: DistributedSampler). Call
  // once, before the first training batch(): a sharded remote source trains each rank on its own
  // partition and starts prefetching it here (ConfigError when batchWorkers != world). By default
  // every rank samples the whole set (DistributedSampler).
  virtual std::unique_ptr<BatchSampler> makeSampler(int rank, int world, size_t localBatch,
                                                    uint64_t seed, int batchWorkers) {
    return std::make_unique<DistributedSampler>(trainSize(), rank, world, localBatch, seed,
                                                batchWorkers);
  }
  // A remote source's cache counters (data/shard_cache.h); nullopt for local data.
  virtual std::optional<ShardCacheStats> cacheStats() const { return std::nullopt; }
};

// "fashion-mnist" (read from dataDir; DataError if missing or corrupt), "synthetic" (random
// 1x28x28 inputs and labels, syntheticSamples of them), or "text[:PATH]" (a UTF-8 file or a
// folder of them, Debian's fortunes without PATH; data/text_corpus.h) in windows of
// `contextTokens` + 1 tokens, which must then be > 0 (a language model's context). ConfigError
// for another name.
std::unique_ptr<DataSource> openDataSource(const std::string& name, const std::string& dataDir,
                                           size_t syntheticSamples, uint64_t seed,
                                           size_t contextTokens = 0);
// Whether `dataset` names text ("text" or "text:PATH").
bool isTextDataset(const std::string& dataset);

struct TrainOptions;
// The training run's data: the remote store through the cache with --data-url
// (torch/loop/remote_data_source.h), otherwise openDataSource's.
std::unique_ptr<DataSource> openTrainingData(const TrainOptions& options);

}  // namespace gradsync
