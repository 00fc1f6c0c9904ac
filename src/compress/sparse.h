// The wire format of sparse encodings (topk, mstopk, gtopk, dgc): a count, then the indices,
// then the values, little-endian, 4 + 8k bytes for k pairs. Indices are those of the unit's
// flat buffer; units are below 2^32 elements (checked when encoding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

// Bytes of an encoding of k pairs.
inline size_t sparseBytes(size_t k) {
  return 4 + 8 * k;
}

// Replaces `out` with the encoding of (indices[i], values[i]); both spans have the same size.
void encodeSparse(std::span<const uint32_t> indices, std::span<const float> values,
                  std::vector<uint8_t>& out);
// Encodes x[indices[i]] for each index.
void encodeSparseGather(std::span<const float> x, std::span<const uint32_t> indices,
                        std::vector<uint8_t>& out);

// out[index] += value for every pair. Throws ProtocolError if the size does not match the count
// or an index is outside `out`.
void decodeSparseAdd(std::span<const uint8_t> in, std::span<float> out);

// A validated view of an encoding (throws as decodeSparseAdd for a buffer of `elements`).
// The bytes may be unaligned, so pairs are read through accessors.
struct SparseView {
  size_t count = 0;
  const uint8_t* indexBytes = nullptr;
  const uint8_t* valueBytes = nullptr;
  uint32_t index(size_t i) const;
  float value(size_t i) const;
};
SparseView viewSparse(std::span<const uint8_t> in, size_t elements);

}  // namespace gradsync
