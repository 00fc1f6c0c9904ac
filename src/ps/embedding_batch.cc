#include "ps/embedding_batch.h"

#include <unordered_map>

#include "common/check.h"

namespace gradsync {

EmbeddingBatch EmbeddingBatch::of(const EmbeddingSpec& spec, std::span<const int64_t> sampleRows,
                                  size_t samples) {
  const auto tables = static_cast<size_t>(spec.tables());
  GS_CHECK_EQ(sampleRows.size(), samples * tables);
  EmbeddingBatch batch;
  batch.rows.resize(tables);
  batch.positions.resize(tables);
  batch.uses.resize(tables);
  batch.byServer.resize(static_cast<size_t>(spec.shards));
  std::unordered_map<uint64_t, uint32_t> seen;
  for (size_t t = 0; t < tables; ++t) {
    seen.clear();
    batch.positions[t].resize(samples);
    for (size_t i = 0; i < samples; ++i) {
      const int64_t row = sampleRows[i * tables + t];
      GS_CHECK(row >= 0 && static_cast<uint64_t>(row) < spec.tableRows[t]);
      auto [it, inserted] =
          seen.try_emplace(static_cast<uint64_t>(row), static_cast<uint32_t>(batch.rows[t].size()));
      if (inserted) {
        batch.rows[t].push_back(static_cast<uint64_t>(row));
        batch.uses[t].push_back(0);
        const auto server =
            static_cast<size_t>(static_cast<uint64_t>(row) % static_cast<uint64_t>(spec.shards));
        batch.byServer[server].emplace_back(static_cast<int>(t), it->second);
      }
      ++batch.uses[t][it->second];
      batch.positions[t][i] = it->second;
    }
  }
  return batch;
}

size_t EmbeddingBatch::distinctRows() const {
  size_t total = 0;
  for (const auto& r : rows) total += r.size();
  return total;
}

std::vector<uint64_t> EmbeddingBatch::keys(int server) const {
  std::vector<uint64_t> keys;
  for (auto [table, index] : byServer[static_cast<size_t>(server)]) {
    keys.push_back(rowKey(table, rows[table][index]));
  }
  return keys;
}

std::vector<uint32_t> EmbeddingBatch::accesses(int server) const {
  std::vector<uint32_t> accesses;
  for (auto [table, index] : byServer[static_cast<size_t>(server)]) {
    accesses.push_back(uses[table][index]);
  }
  return accesses;
}

}  // namespace gradsync
