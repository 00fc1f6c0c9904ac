// Fashion-MNIST (or any image shards written by `gradsync shard`) read from a remote HTTP store
// through the multi-level cache (data/shard_cache.h): `gradsync train --data-url URL`.
// Torch-free.
//
// Each rank trains on its own partition of the training shards (data/shard_sampler.h), so its
// host fetches and caches only that. A prefetch thread, started by makeSampler(), loads the
// partition's shards in the order the first epoch uses them, overlapping the downloads of epoch
// 1 with training; batch() blocks only for a shard that is not loaded yet. Test batches load
// the test shards they touch on first use (every rank evaluates on the whole test set).
//
// Thread-safety: batch() may run concurrently with the prefetch thread (the cache is
// thread-safe); makeSampler() is called once, before the first training batch.
#pragma once

#include <memory>

#include "data/shard_cache.h"
#include "torch/loop/data_source.h"

namespace gradsync {

// Blocking: fetches the manifest (the constructor of ShardCache). DataError when the server
// cannot be reached and nothing is cached, or its manifest is malformed.
std::unique_ptr<DataSource> openRemoteDataSource(const ShardCacheOptions& options);

}  // namespace gradsync
