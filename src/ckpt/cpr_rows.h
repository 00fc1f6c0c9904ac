// Which embedding rows a CPR partial save point writes (docs/algorithms.md, "Partial recovery
// (CPR)"). Rows are a shard's local row indices. Torch-free.
//
// CPR-MFU keeps, per row, the accesses since the row was last saved, and saves the rows with the
// most: for a given number of rows written, that saves the most updates (the greedy optimum), and
// under skewed access it is the frequently used rows, saved at every point. Under uniform access
// it rotates through the table, as a full save spread over several points would.
//
// CPR-SSU keeps no counters: each access puts its row in a small sample with probability p, and a
// save point writes the sampled rows. Frequently used rows are almost surely in it; rare ones
// rarely. The draw is a hash of (seed, round, row), so a run repeats exactly.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

namespace gradsync {

// The ceil(fraction · rows) rows with the most pending accesses (`pending`, by row), ties to the
// lower index; rows with none pending are never chosen (they have nothing new to save). Sorted
// ascending. fraction in (0, 1] (GS_CHECK).
std::vector<uint64_t> mostUsedRows(std::span<const uint32_t> pending, double fraction);

class RowSubSample {
 public:
  // rate: the probability p in (0, 1] that one access samples its row (GS_CHECK).
  RowSubSample(double rate, uint64_t seed);

  // Round `round` accessed `row` `accesses` times: the row enters the sample with probability
  // 1 − (1 − p)^accesses (one access at a time, at rate p), decided by wouldSample.
  void record(uint64_t row, uint32_t accesses, uint64_t round);
  // Whether record() samples the row (the rule, for tests).
  bool wouldSample(uint64_t row, uint32_t accesses, uint64_t round) const;
  // The rows sampled since the last take(), ascending; empties the sample.
  std::vector<uint64_t> take();
  size_t size() const { return rows_.size(); }

 private:
  double rate_;
  uint64_t seed_;
  std::unordered_set<uint64_t> rows_;
};

}  // namespace gradsync
