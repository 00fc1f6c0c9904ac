// Embedding tables sharded row-wise over parameter servers (docs/algorithms.md, "Embeddings on
// parameter servers"): row r of every table lives on server r mod S. EmbeddingShard is one
// server's rows with their optimizer state (Adagrad's sums of squares, or none for plain SGD),
// the per-row access counts CPR needs, and its checkpoint sections. Torch-free.
//
// Access counts: each push says how many samples used each row (`accesses`). A row keeps its
// cumulative count (the updates its current value holds: a restore brings back the counts saved
// with the values) and its count since it was last saved (CPR-MFU's priority).
//
// Threading: not thread-safe; the server serializes calls.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/cpr_rows.h"
#include "optim/update_rule.h"

namespace gradsync {

struct EmbeddingSpec {
  std::vector<uint64_t> tableRows;  // rows per table (each < 2^40)
  int dim = 16;                     // floats per row
  int shards = 1;                   // embedding servers
  uint64_t seed = 0;                // initial values

  int tables() const { return static_cast<int>(tableRows.size()); }
  uint64_t totalRows() const {
    uint64_t total = 0;
    for (uint64_t rows : tableRows) total += rows;
    return total;
  }
  // Rows r < tableRows[t] with r mod shards == shard.
  uint64_t rowsOn(int table, int shard) const;
};

// A row's key on the wire: (table << 40) | row.
inline constexpr int kRowKeyBits = 40;
inline uint64_t rowKey(int table, uint64_t row) {
  return (static_cast<uint64_t>(table) << kRowKeyBits) | row;
}
inline int tableOfKey(uint64_t key) {
  return static_cast<int>(key >> kRowKeyBits);
}
inline uint64_t rowOfKey(uint64_t key) {
  return key & ((uint64_t{1} << kRowKeyBits) - 1);
}

// DLRM's initialisation of a row of a table of n rows: each value uniform in (-sqrt(1/n),
// sqrt(1/n)), here a pure function of (seed, table, row), so every rank and every path (servers,
// or the tables replicated on the workers) starts from the same values.
void initialRow(const EmbeddingSpec& spec, int table, uint64_t row, std::span<float> out);

// Throws ConfigError for no table, a table of 0 or >= 2^40 rows, dim < 1 or shards < 1.
void validateEmbeddingSpec(const EmbeddingSpec& spec);

class EmbeddingShard {
 public:
  // Every row of `shard` at its initial value. `rule`: Adagrad or SGD without momentum.
  EmbeddingShard(const EmbeddingSpec& spec, int shard, UpdateRule rule);

  int shard() const { return shard_; }
  const EmbeddingSpec& spec() const { return spec_; }
  size_t rows() const { return keys_.size(); }
  int dim() const { return spec_.dim; }
  // The local index of a key, or nullopt when the key is not a row of this shard.
  std::optional<uint64_t> localIndex(uint64_t key) const;
  uint64_t keyOf(uint64_t local) const { return keys_[local]; }

  // The values of rows `locals` into `out` (dim floats each).
  void gather(std::span<const uint64_t> locals, std::span<float> out) const;
  // One update of each row of `locals` (distinct) with its gradient (dim floats each) and the
  // samples that used it; `round` feeds CPR-SSU's sample.
  void apply(std::span<const uint64_t> locals, std::span<const float> gradients,
             std::span<const uint32_t> accesses, uint64_t round);

  // CPR: the rows a partial save writes (MFU: by pending accesses; SSU: the sample, emptied).
  std::vector<uint64_t> mostUsed(double fraction) const { return mostUsedRows(pending_, fraction); }
  void enableSubSample(double rate, uint64_t seed);
  std::vector<uint64_t> takeSubSample();

  // Checkpoint sections of every row, or of `locals` only; both clear the saved rows' pending
  // counts.
  std::vector<Section> saveFull(int64_t step);
  std::vector<Section> savePartial(int64_t step, std::span<const uint64_t> locals);
  // Replaces the state with `full`'s, then each of `partials` in order over it. Throws DataError
  // naming the file when a save is of another shard, spec or optimizer, or malformed.
  void restore(const LoadedCheckpoint& full, std::span<const LoadedCheckpoint> partials);

  // The updates the rows' current values hold (the sum of their cumulative access counts).
  uint64_t accessesHeld() const;
  uint32_t pending(uint64_t local) const { return pending_[local]; }

 private:
  std::vector<Section> sections(int64_t step, bool full, std::span<const uint64_t> locals);
  void load(const LoadedCheckpoint& save, bool full);

  EmbeddingSpec spec_;
  int shard_;
  UpdateRule rule_;
  std::vector<uint64_t> tableStart_;  // local index of each table's first row here
  std::vector<uint64_t> keys_;        // by local index
  std::vector<float> values_;         // rows x dim
  std::vector<float> state_;          // rows x dim (Adagrad) or empty (SGD)
  std::vector<uint64_t> accesses_;    // cumulative, by local row
  std::vector<uint32_t> pending_;     // since the row was last saved
  std::optional<RowSubSample> sample_;
};

}  // namespace gradsync
