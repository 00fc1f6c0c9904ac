// Checks shared by the tests of the quantized codecs (qsgd, terngrad, onebit, signsgd): direct
// encode/decode, the consistency of an all-gather exchange, and bit-level edits of an
// encoding to corrupt it. Deliberately naive: one bit or one element at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/random.h"
#include "compress/compressor.h"
#include "exchange_harness.h"

namespace gradsync::testing {

// A method's ":value" and, when `bucket` >= 0, its ",bucket=" option.
inline MethodArgs valueArgs(double value, double bucket = -1) {
  MethodArgs args;
  args.value = value;
  args.hasValue = true;
  if (bucket >= 0) args.keys.emplace_back("bucket", std::to_string(static_cast<int64_t>(bucket)));
  return args;
}

inline CodecCompressor& asCodec(Compressor& compressor) {
  return dynamic_cast<CodecCompressor&>(compressor);
}

inline std::vector<uint8_t> encodeOnce(Compressor& compressor, const std::vector<float>& x,
                                       uint64_t seed) {
  std::vector<uint8_t> bytes;
  asCodec(compressor).encode(x, bytes, seed);
  return bytes;
}

inline std::vector<float> decodeOnce(Compressor& compressor, const std::vector<uint8_t>& bytes,
                                     size_t elements) {
  std::vector<float> out(elements, 0.0f);
  asCodec(compressor).decodeAdd(bytes, out);
  return out;
}

// The seed CodecCompressor::exchange gives rank `rank`'s encode at `step`.
inline uint64_t exchangeSeed(uint64_t seed, uint64_t step, int rank) {
  return rng::mixSeed(rng::mixSeed(seed, step), static_cast<uint64_t>(rank));
}

// Every rank ends with bitwise the same result, and it is the average of what the ranks sent,
// summed in rank order.
inline void expectConsistentExchange(const std::vector<RankExchange>& out) {
  const size_t n = out[0].result.size();
  const float inverse = 1.0f / static_cast<float>(out.size());
  for (size_t r = 0; r < out.size(); ++r) {
    ASSERT_EQ(out[r].result.size(), n);
    ASSERT_EQ(0, std::memcmp(out[r].result.data(), out[0].result.data(), n * sizeof(float)))
        << "rank " << r << " disagrees with rank 0";
  }
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (const RankExchange& rank : out) sum += rank.sent[i];
    ASSERT_EQ(out[0].result[i], sum * inverse) << "element " << i;
  }
}

// Code `index` of a packed stream starting at byte `start` (bit_pack.h layout), bit by bit.
inline uint8_t readCode(const std::vector<uint8_t>& bytes, size_t start, int bits, size_t index) {
  uint8_t code = 0;
  for (int b = 0; b < bits; ++b) {
    size_t bit = index * bits + b;
    code |= static_cast<uint8_t>(((bytes[start + bit / 8] >> (bit % 8)) & 1) << b);
  }
  return code;
}

inline void writeCode(std::vector<uint8_t>& bytes, size_t start, int bits, size_t index,
                      uint8_t code) {
  for (int b = 0; b < bits; ++b) {
    size_t bit = index * bits + b;
    uint8_t& byte = bytes[start + bit / 8];
    byte = static_cast<uint8_t>((byte & ~(1u << (bit % 8))) | (((code >> b) & 1u) << (bit % 8)));
  }
}

}  // namespace gradsync::testing
