// The embedding rows a batch touches, deduplicated (docs/algorithms.md, "Embeddings on parameter
// servers"): per table, the distinct rows in order of first use, each sample's position among
// them (what EmbeddingBag indexes), how many samples use each, and which rows go to which server.
// A worker pulls and pushes each distinct row once per step, whatever the batch size.
// Torch-free; a plain value.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ps/embedding_shard.h"

namespace gradsync {

struct EmbeddingBatch {
  std::vector<std::vector<uint64_t>> rows;      // per table: distinct rows
  std::vector<std::vector<int64_t>> positions;  // per table, per sample: index into rows[t]
  std::vector<std::vector<uint32_t>> uses;      // per table, per distinct row: samples using it
  // Per server, the (table, index into rows[table]) of each row it holds, in the order its keys
  // travel.
  std::vector<std::vector<std::pair<int, uint32_t>>> byServer;

  // From a batch's rows (samples x tables, sample-major, as ClickBatch::rows), for `spec`'s
  // placement. Rows must be within their tables (GS_CHECK).
  static EmbeddingBatch of(const EmbeddingSpec& spec, std::span<const int64_t> sampleRows,
                           size_t samples);
  size_t distinctRows() const;
  // The keys of server s's rows, in byServer order.
  std::vector<uint64_t> keys(int server) const;
  // The accesses of server s's rows, in byServer order.
  std::vector<uint32_t> accesses(int server) const;
};

}  // namespace gradsync
