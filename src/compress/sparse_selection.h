// The codec shared by the methods that send k = selectionCount(n, R) elements of the input as
// they are (topk, mstopk): a subclass chooses the indices, this class writes them in the sparse
// wire format (sparse.h: 4 + 8k bytes) and decodes with stricter checks than the format alone,
// since these encodings always carry exactly k pairs at strictly ascending indices.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compress/compressor.h"

namespace gradsync {

// The density ":R" of a sparse method; throws ConfigError "<method>:R needs 0 < R <= 1" unless
// it is in range.
double checkedDensity(const MethodArgs& args, const char* method);

class SparseSelectionCodec : public CodecCompressor {
 public:
  explicit SparseSelectionCodec(double density) : density_(density) {}

  size_t encodedBytes(size_t elements) const override;
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) override;
  // Throws ProtocolError unless `in` is a well-formed encoding of exactly k pairs with strictly
  // ascending indices inside `out`; `out` is untouched then.
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override;

 protected:
  // Replaces `indices` with exactly k indices of `x`, ascending.
  virtual void select(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) = 0;

 private:
  double density_;
  std::vector<uint32_t> indices_;  // reused across steps
};

}  // namespace gradsync
