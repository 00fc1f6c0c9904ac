// The multi-level data cache (Shi et al.): shards of a dataset served by a remote HTTP store,
// kept on local disk, then in memory. A shard is fetched from the server once, written to the
// disk cache, and decoded into memory; later reads come from memory, or from disk when the
// memory budget evicted it (least recently used first). Every copy is validated by the
// manifest's checksum wherever it came from: a corrupt cached shard is logged, deleted and
// fetched again; a shard that arrives corrupt is fetched once more before failing. The disk
// cache survives restarts (files are written to a temporary name and renamed, so a crash
// leaves no half-written shard under its real name) and may be shared by the ranks of a host.
//
// Thread-safe: get() may be called from several threads (the prefetcher and the training
// thread); concurrent gets of one shard load it once. get() blocks on disk and network I/O.
// Failures throw DataError naming the shard and the server (server down or stopped mid-run,
// HTTP error, corrupt twice).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/http_get.h"
#include "data/image_set.h"
#include "data/shard_format.h"

namespace gradsync {

struct ShardCacheOptions {
  std::string url;        // the store's base: BASE/manifest.txt and BASE/<shard name>
  std::string directory;  // the disk level (created if missing)
  uint64_t memoryBytes = uint64_t{1} << 30;  // the memory level's budget (decoded bytes); 0: none
  HttpGetOptions http;
};

// Counters since construction: each get() is a memory hit, a disk hit or one or two fetches.
struct ShardCacheStats {
  int64_t memoryHits = 0;
  int64_t diskHits = 0;
  int64_t remoteFetches = 0;  // GETs of shards (a corrupt copy's second GET included)
  int64_t corruptShards = 0;  // copies that failed the checksum (disk or network)
  uint64_t remoteBytes = 0;
  double remoteSeconds = 0;  // in GETs
  double diskSeconds = 0;    // reading and writing the disk level
};

class ShardCache {
 public:
  // Fetches the manifest from the server and keeps a copy on disk; when the server cannot be
  // reached and a copy from an earlier run exists, uses that one (a warning says so), so a
  // fully cached dataset trains without the server. Blocking.
  explicit ShardCache(ShardCacheOptions options);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  const ShardManifest& manifest() const;
  // The shard decoded (shared with the memory level; never modified). Blocking.
  std::shared_ptr<const ImageSet> get(const ShardInfo& shard);
  ShardCacheStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The default disk cache for `url`: $XDG_CACHE_HOME (or ~/.cache)/gradsync/data/<url as a
// file name>.
std::string defaultCacheDirectory(const std::string& url);

}  // namespace gradsync
