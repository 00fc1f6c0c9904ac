// Click logs for recommendation models (docs/data.md, "Click logs"): samples with dense
// (count-like) and categorical features and a 0/1 click label, as in Criteo's display-advertising
// logs (13 dense, 26 categorical). Torch-free.
//
// A sample exists in two forms: the raw record as the logs hold it (integer counts, possibly
// missing; 32-bit categorical hashes, possibly missing) and the model's input, a ClickBatch row:
// log(1 + max(count, 0)) per dense feature (0 where missing) and, per categorical feature, a row
// of its embedding table (hash mod the table's size; 0 where missing). The synthetic generator
// and the TSV reader both produce records and turn them into batches with the same function, so
// a synthetic log written as TSV reads back exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gradsync {

inline constexpr int kCriteoDenseFeatures = 13;
inline constexpr int kCriteoTables = 26;

// The features of a log and the embedding tables they index.
struct ClickSchema {
  int denseFeatures = kCriteoDenseFeatures;
  std::vector<uint64_t> tableRows;  // rows of each categorical feature's table (each >= 1)

  int tables() const { return static_cast<int>(tableRows.size()); }
  uint64_t totalRows() const;
};

// Criteo Kaggle's cardinalities (26 tables), each capped at `maxRows` (>= 1): the sizes of
// `--model dlrm`'s tables by default.
std::vector<uint64_t> criteoTableRows(uint64_t maxRows);

// One raw sample.
struct ClickRecord {
  int label = 0;                                // 0 or 1
  std::vector<std::optional<int64_t>> counts;   // denseFeatures values; nullopt: missing
  std::vector<std::optional<uint32_t>> hashes;  // one per table; nullopt: missing
};

// Samples as the model takes them; the caller owns it and reuses it across reads.
struct ClickBatch {
  size_t size = 0;
  std::vector<float> dense;   // size x denseFeatures, sample-major
  std::vector<int64_t> rows;  // size x tables, sample-major: sample i's row of table t at
                              // [i * tables + t]
  std::vector<float> labels;  // size, 0 or 1

  // Makes room for `samples` samples of `schema` (contents unspecified).
  void resize(const ClickSchema& schema, size_t samples);
};

// Writes `record` as sample `index` of `batch` (already sized). Checks the record's shape
// against the schema (GS_CHECK: the producers build it from the schema).
void putRecord(const ClickSchema& schema, const ClickRecord& record, size_t index,
               ClickBatch& batch);

// A log with random access by sample index (sample order is the log's order: time order for
// Criteo). Implementations are thread-safe: read() may be called concurrently.
class ClickData {
 public:
  virtual ~ClickData() = default;
  virtual const ClickSchema& schema() const = 0;
  virtual size_t size() const = 0;
  // Samples [first, first + count) into `out` (resized). Throws DataError when the underlying
  // file turns out malformed; GS_CHECK for a range beyond size().
  virtual void read(size_t first, size_t count, ClickBatch& out) const = 0;
  // The raw record of sample `index` (for writing logs out, and tests).
  virtual ClickRecord record(size_t index) const = 0;
};

}  // namespace gradsync
