// The codec shared by the methods that send k = selectionCount(n, R) elements of the input as
// they are (topk, mstopk): a subclass chooses the indices, this class writes them in the sparse
// wire format (sparse.h: 4 + 8k bytes) and decodes with stricter checks than the format alone,
// since these encodings carry exactly k pairs at strictly ascending indices. With a budget
// (SparseBudget: p3's share of a tensor's k) the count is the budget's, and any count is
// accepted from other ranks; encodedBytes stays the density's share (the typical size).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "compress/compressor.h"

namespace gradsync {

// The density ":R" of a sparse method; throws ConfigError "<method>:R needs 0 < R <= 1" unless
// it is in range.
double checkedDensity(const MethodArgs& args, const char* method);
// The ThresholdSelector's "iters" option of a method (default 20); throws ConfigError "<method>
// iters needs an integer 1 <= iters <= 30" unless it is one (the grid keys have iters + 1 bits
// and the selector takes at most 31).
int checkedIterations(const MethodArgs& args, const char* method);

class SparseSelectionCodec : public CodecCompressor, public SparseBudget {
 public:
  explicit SparseSelectionCodec(double density) : density_(density) {}

  SparseBudget* sparseBudget() override { return this; }
  double density() const override { return density_; }
  void setBudget(size_t k) override;

  size_t encodedBytes(size_t elements) const override;
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) override;
  // Throws ProtocolError unless `in` is a well-formed encoding of exactly k pairs (any count,
  // once budgeted) with strictly ascending indices inside `out`; `out` is untouched then.
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override;

 protected:
  // Replaces `indices` with exactly k indices of `x`, ascending.
  virtual void select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) = 0;

 private:
  double density_;
  std::optional<size_t> budget_;   // for the next encode
  bool budgeted_ = false;          // budgets are in use: counts vary
  std::vector<uint32_t> indices_;  // reused across steps
};

}  // namespace gradsync
