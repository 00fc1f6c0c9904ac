#include "data/click_log.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/check.h"

namespace gradsync {
namespace {

// Criteo Kaggle (display advertising challenge) cardinalities of C1..C26, as DLRM's scripts
// list them (../shared/reference/seed004-methods.md §1.7).
constexpr std::array<uint64_t, kCriteoTables> kKaggleCardinalities = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

}  // namespace

uint64_t ClickSchema::totalRows() const {
  uint64_t total = 0;
  for (uint64_t rows : tableRows) total += rows;
  return total;
}

std::vector<uint64_t> criteoTableRows(uint64_t maxRows) {
  GS_CHECK(maxRows >= 1);
  std::vector<uint64_t> rows(kKaggleCardinalities.begin(), kKaggleCardinalities.end());
  for (uint64_t& r : rows) r = std::min(r, maxRows);
  return rows;
}

void ClickBatch::resize(const ClickSchema& schema, size_t samples) {
  size = samples;
  dense.resize(samples * static_cast<size_t>(schema.denseFeatures));
  rows.resize(samples * static_cast<size_t>(schema.tables()));
  labels.resize(samples);
}

void putRecord(const ClickSchema& schema, const ClickRecord& record, size_t index,
               ClickBatch& batch) {
  const auto features = static_cast<size_t>(schema.denseFeatures);
  const auto tables = static_cast<size_t>(schema.tables());
  GS_CHECK_EQ(record.counts.size(), features);
  GS_CHECK_EQ(record.hashes.size(), tables);
  GS_CHECK_LT(index, batch.size);
  for (size_t j = 0; j < features; ++j) {
    // DLRM's transform of Criteo's counts: log(1 + x), negatives (a few in the logs) as 0.
    const int64_t count = record.counts[j].value_or(0);
    batch.dense[index * features + j] = std::log1p(static_cast<float>(std::max<int64_t>(count, 0)));
  }
  for (size_t t = 0; t < tables; ++t) {
    const uint64_t hash = record.hashes[t].value_or(0);
    batch.rows[index * tables + t] = static_cast<int64_t>(hash % schema.tableRows[t]);
  }
  batch.labels[index] = record.label != 0 ? 1.0f : 0.0f;
}

}  // namespace gradsync
