// A seeded generator of Criteo-like click logs (docs/data.md, "Click logs"): 13 count-like dense
// features and categorical features whose values follow a Zipf law per table (skewed access, as in
// production: a few rows take most lookups), and labels drawn from a planted model, so that a
// trained model's AUC means something and losing updates of frequently used rows costs accuracy.
//
// The planted ("teacher") model, per sample with dense values x (log(1 + count)) and rows r_t:
//   logit = b + sum_j w_j x_j + sum_t u_t(r_t) + sum_t <v_t(r_t), v_{t+1}(r_{t+1})>
// (t + 1 wraps around), with w_j, u_t(r) and the 4-dimensional v_t(r) normal, each a pure function
// of (seed, table, row), so tables of millions of rows cost no memory; b is set so that about
// `clickRate` of the samples click (Criteo's is about 26%); the label is Bernoulli(sigmoid(logit)).
//
// Sample i of a split is a pure function of (seed, split, i): any range is generated directly,
// on any rank, in any order. The test split is a disjoint stream of the same distribution.
// Immutable after construction; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/click_log.h"
#include "data/zipf.h"

namespace gradsync {

struct CriteoLikeOptions {
  std::vector<uint64_t> tableRows = criteoTableRows(100'000);
  double zipf = 1.1;  // the access skew of every table (0: uniform access)
  size_t trainSamples = size_t{1} << 22;
  size_t testSamples = size_t{1} << 14;
  double clickRate = 0.25;
  uint64_t seed = 0;
};

class CriteoLikeLog final : public ClickData {
 public:
  enum class Split { kTrain, kTest };
  // Throws ConfigError for an empty table list, a table of 0 rows, a negative skew or a click
  // rate outside (0, 1).
  CriteoLikeLog(const CriteoLikeOptions& options, Split split);

  const ClickSchema& schema() const override { return schema_; }
  size_t size() const override { return size_; }
  void read(size_t first, size_t count, ClickBatch& out) const override;
  ClickRecord record(size_t index) const override;

  // The planted model's logit of a record (tests: the labels follow it).
  double teacherLogit(const ClickRecord& record) const;
  // Which rank (1 = most frequent) of table t's Zipf law maps to `row`'s inverse: the row that
  // rank k is (tests, planning).
  uint64_t rowOfRank(int table, uint64_t rank) const;

 private:
  ClickRecord draw(uint64_t stream) const;  // the unlabelled record of stream position `stream`
  double unbiasedLogit(const ClickRecord& record) const;
  double calibrateBias() const;
  void plantTeacher();
  // The planted weights of (table, row): its bias u and vector v (kTeacherWidth floats).
  void teacherRow(size_t table, uint64_t row, float* out) const;

  CriteoLikeOptions options_;
  ClickSchema schema_;
  Split split_;
  size_t size_;
  std::vector<ZipfDistribution> zipf_;  // one per table
  std::vector<uint64_t> permutation_;   // per table: row = (a * (rank - 1) + c) mod rows
  std::vector<uint64_t> offset_;        // per table: c
  double bias_ = 0;
  std::vector<double> denseWeights_;
  // Per table, rows x kTeacherWidth planted weights, when all tables together are small enough
  // to keep (else each is computed when needed, from its hash).
  std::vector<std::vector<float>> teacher_;
};

}  // namespace gradsync
