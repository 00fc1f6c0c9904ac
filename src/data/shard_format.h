// Dataset shards as a remote store serves them (`gradsync shard` writes them, the multi-level
// cache reads them): one file per shard of consecutive samples, and a text manifest naming every
// shard with its size and checksum, so a reader can validate a shard wherever it came from
// (server, disk cache) before using it.
//
// Shard file: the 8 bytes "GSSHARD1", then little-endian u32 count, u16 rows, u16 cols, then
// `count` labels (u8), then count * rows * cols pixels (u8, row-major, image after image).
// Uncompressed on purpose: the cache keeps shards as they are used, and decoding costs nothing.
//
// Manifest (manifest.txt), one record per line:
//   gradsync-shards 1
//   images ROWS COLS CLASSES
//   train|test NAME SAMPLES BYTES CRC32(hex)
//
// All functions are pure and thread-safe; failures throw DataError naming the shard or file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/image_set.h"

namespace gradsync {

struct ShardInfo {
  std::string name;  // file name, relative to the store's base (no '/')
  int64_t samples = 0;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file
};

struct ShardManifest {
  int rows = 0;
  int cols = 0;
  int classes = 0;
  std::vector<ShardInfo> train;  // in sample order: sample i of the split is in the first shard
  std::vector<ShardInfo> test;   // whose running count exceeds i

  int64_t trainSamples() const;
  int64_t testSamples() const;
};

uint32_t crc32Of(std::span<const uint8_t> bytes);

// The file bytes of one shard holding `set`'s images [first, first + count).
std::vector<uint8_t> encodeShard(const ImageSet& set, int64_t first, int64_t count);

// Parses and checks a shard file against `info` (size, checksum, then the header against the
// manifest's image shape and sample count). `what` names it in errors ("shard train-00003.gss
// from http://...").
ImageSet decodeShard(std::span<const uint8_t> bytes, const ShardInfo& info,
                     const ShardManifest& manifest, const std::string& what);

// Whether `bytes` are exactly the shard `info` describes (size and checksum): the cache's test.
bool matchesShard(std::span<const uint8_t> bytes, const ShardInfo& info);

std::string formatManifest(const ShardManifest& manifest);
// DataError naming `what` for a malformed manifest (unknown version, bad line, a name with '/',
// no training shard, a shard without samples).
ShardManifest parseManifest(const std::string& text, const std::string& what);

// Splits Fashion-MNIST (or any image sets) into shards of `samplesPerShard` and writes them and
// manifest.txt into `outDir` (created if missing). Returns the manifest. Blocking file I/O.
ShardManifest writeShards(const ImageSet& train, const ImageSet& test, int classes,
                          int64_t samplesPerShard, const std::string& outDir);

}  // namespace gradsync
