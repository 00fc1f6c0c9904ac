// Packing works on groups of 8 codes, which fill exactly `bits` bytes: the group is assembled
// in a 64-bit word and copied out, so every width is one shift-or loop with constant shifts
// (one instantiation per width) instead of a bit-by-bit loop. On the AVX-512 path (common/
// simd.h) BMI2's pext and pdep move a whole group at once: the eight codes' low bits are
// exactly the bits pext(group, mask) keeps, in order. Only there: every CPU with AVX-512 runs
// them in a cycle, while AMD's before Zen 3 microcode them (hundreds of cycles). One-bit codes
// are packed by movemask, codes of 2, 4 and 6 bits by multiply-adds, on both AVX paths.
#include "compress/bit_pack.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/simd.h"
#include "gradsync/error.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the packed stream is copied to and from 64-bit words as little-endian bytes");

template <int kBits>
uint64_t gather(const uint8_t* codes, size_t count) {
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  uint64_t word = 0;
  for (size_t j = 0; j < count; ++j) word |= (codes[j] & kMask) << (j * kBits);
  return word;
}

template <int kBits>
void scatter(uint64_t word, uint8_t* codes, size_t count) {
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  for (size_t j = 0; j < count; ++j) codes[j] = static_cast<uint8_t>((word >> (j * kBits)) & kMask);
}

template <int kBits>
void packFixed(const uint8_t* codes, size_t count, uint8_t* out) {
  const size_t groups = count / 8;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = gather<kBits>(codes + 8 * g, 8);
    std::memcpy(out + kBits * g, &word, kBits);
  }
  if (size_t rest = count % 8; rest > 0) {
    uint64_t word = gather<kBits>(codes + 8 * groups, rest);
    std::memcpy(out + kBits * groups, &word, packedBytes(rest, kBits));
  }
}

template <int kBits>
void unpackFixed(const uint8_t* in, size_t count, uint8_t* codes) {
  const size_t groups = count / 8;
  // A group is read as a whole 64-bit word wherever 8 bytes remain (scatter ignores the bytes
  // past the group): a narrower copy is a store forwarded into a wider load, which stalls
  // (5x slower for 3, 5, 6 and 7 bits).
  const size_t bytes = packedBytes(count, kBits);
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    if (kBits * g + 8 <= bytes) {
      std::memcpy(&word, in + kBits * g, 8);
    } else {
      std::memcpy(&word, in + kBits * g, kBits);
    }
    scatter<kBits>(word, codes + 8 * g, 8);
  }
  if (size_t rest = count % 8; rest > 0) {
    uint64_t word = 0;
    std::memcpy(&word, in + kBits * groups, packedBytes(rest, kBits));
    scatter<kBits>(word, codes + 8 * groups, rest);
  }
}

#if GS_SIMD_X86
// The low kBits bits of each of 8 bytes.
template <int kBits>
constexpr uint64_t kGroupMask = 0x0101010101010101ull * ((uint64_t{1} << kBits) - 1);

template <int kBits>
GS_TARGET_AVX512 void packFixedPext(const uint8_t* codes, size_t count, uint8_t* out) {
  const size_t groups = count / 8;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t group;
    std::memcpy(&group, codes + 8 * g, 8);
    const uint64_t word = _pext_u64(group, kGroupMask<kBits>);
    std::memcpy(out + kBits * g, &word, kBits);
  }
  if (size_t rest = count % 8; rest > 0) {
    uint64_t word = gather<kBits>(codes + 8 * groups, rest);
    std::memcpy(out + kBits * groups, &word, packedBytes(rest, kBits));
  }
}

// One-bit codes 32 at a time on the AVX paths: shifted to each byte's top bit, where movemask
// collects them in order (a cycle for 32 codes, where pext takes one for 8).
GS_TARGET_AVX2 void packOneBitAvx2(const uint8_t* codes, size_t count, uint8_t* out) {
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256i group = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
    const auto bits = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(group, 7)));
    std::memcpy(out + i / 8, &bits, 4);
  }
  packFixed<1>(codes + i, count - i, out + i / 8);
}

// Codes of an even width up to 6 bits, 32 at a time on the AVX paths: two multiply-adds gather
// each four adjacent codes into the low 4 kBits bits of a 32-bit lane, c0 + c1 2^b + c2 2^2b +
// c3 2^3b (code j of the four at bits j b, as the stream orders them): whole bytes, kBits / 2
// of them, which a shuffle moves together. (The first weight, 2^b, must fit a signed byte and
// the second, 2^2b, a signed 16-bit word: b <= 6; odd widths do not fill whole bytes.)
template <int kBits>
GS_TARGET_AVX2 void packEvenBitsAvx2(const uint8_t* codes, size_t count, uint8_t* out) {
  static_assert(kBits % 2 == 0 && kBits >= 2 && kBits <= 6);
  constexpr int kLaneBytes = kBits / 2;  // per four codes
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << kBits) - 1));
  const __m256i pairWeights = _mm256_set1_epi16(static_cast<int16_t>(1 | (1 << kBits) << 8));
  const __m256i quadWeights = _mm256_set1_epi32(1 | (1 << 2 * kBits) << 16);
  // Per 128-bit half: the low kLaneBytes bytes of each of its four 32-bit lanes, in order.
  alignas(32) int8_t order[32];
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 16; ++k) {
      order[16 * half + k] = k < 4 * kLaneBytes ? (k / kLaneBytes) * 4 + k % kLaneBytes : -1;
    }
  }
  const __m256i gather = _mm256_load_si256(reinterpret_cast<const __m256i*>(order));
  alignas(32) uint8_t packed[32];
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256i group =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)), mask);
    const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(group, pairWeights), quadWeights);
    _mm256_store_si256(reinterpret_cast<__m256i*>(packed), _mm256_shuffle_epi8(lanes, gather));
    uint8_t* to = out + i / 8 * kBits;
    std::memcpy(to, packed, 4 * kLaneBytes);
    std::memcpy(to + 4 * kLaneBytes, packed + 16, 4 * kLaneBytes);
  }
  packFixed<kBits>(codes + i, count - i, out + i / 8 * kBits);
}

template <int kBits>
GS_TARGET_AVX512 void unpackFixedPdep(const uint8_t* in, size_t count, uint8_t* codes) {
  const size_t groups = count / 8;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    std::memcpy(&word, in + kBits * g, kBits);
    const uint64_t group = _pdep_u64(word, kGroupMask<kBits>);
    std::memcpy(codes + 8 * g, &group, 8);
  }
  if (size_t rest = count % 8; rest > 0) {
    uint64_t word = 0;
    std::memcpy(&word, in + kBits * groups, packedBytes(rest, kBits));
    scatter<kBits>(word, codes + 8 * groups, rest);
  }
}
#endif

template <int kBits>
void packWidth(const uint8_t* codes, size_t count, uint8_t* out) {
#if GS_SIMD_X86
  if (kBits == 1 && simd::active() != simd::Path::kScalar) {
    return packOneBitAvx2(codes, count, out);
  }
  if constexpr (kBits % 2 == 0 && kBits <= 6) {
    if (simd::active() != simd::Path::kScalar) return packEvenBitsAvx2<kBits>(codes, count, out);
  }
  if (simd::active() == simd::Path::kAvx512) return packFixedPext<kBits>(codes, count, out);
#endif
  packFixed<kBits>(codes, count, out);
}

template <int kBits>
void unpackWidth(const uint8_t* in, size_t count, uint8_t* codes) {
#if GS_SIMD_X86
  if (simd::active() == simd::Path::kAvx512) return unpackFixedPdep<kBits>(in, count, codes);
#endif
  unpackFixed<kBits>(in, count, codes);
}

}  // namespace

void packBits(std::span<const uint8_t> codes, int bits, uint8_t* out) {
  const uint8_t* c = codes.data();
  const size_t n = codes.size();
  switch (bits) {
    case 1:
      return packWidth<1>(c, n, out);
    case 2:
      return packWidth<2>(c, n, out);
    case 3:
      return packWidth<3>(c, n, out);
    case 4:
      return packWidth<4>(c, n, out);
    case 5:
      return packWidth<5>(c, n, out);
    case 6:
      return packWidth<6>(c, n, out);
    case 7:
      return packWidth<7>(c, n, out);
    case 8:
      if (n > 0) std::memcpy(out, c, n);  // an empty span's null data() is not for memcpy
      return;
  }
  GS_CHECK(bits >= 1 && bits <= 8);
}

void unpackBits(const uint8_t* in, int bits, std::span<uint8_t> codes) {
  uint8_t* c = codes.data();
  const size_t n = codes.size();
  switch (bits) {
    case 1:
      return unpackWidth<1>(in, n, c);
    case 2:
      return unpackWidth<2>(in, n, c);
    case 3:
      return unpackWidth<3>(in, n, c);
    case 4:
      return unpackWidth<4>(in, n, c);
    case 5:
      return unpackWidth<5>(in, n, c);
    case 6:
      return unpackWidth<6>(in, n, c);
    case 7:
      return unpackWidth<7>(in, n, c);
    case 8:
      if (n > 0) std::memcpy(c, in, n);
      return;
  }
  GS_CHECK(bits >= 1 && bits <= 8);
}

void PackedWriter::flush() {
  packBits({staging_, fill_}, bits_, out_);
  out_ += fill_ * bits_ / 8;  // exact for a full chunk; the last flush needs no advance
  fill_ = 0;
}

void PackedReader::refill() {
  GS_CHECK(left_ > 0);
  size_t n = std::min(left_, kCodeChunk);
  unpackBits(in_, bits_, {staging_, n});
  in_ += n * bits_ / 8;  // exact for a full chunk; after the last one nothing is read
  left_ -= n;
  pos_ = 0;
  avail_ = n;
  uint8_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, staging_[i]);
  if (largest > maxCode_) {
    throw ProtocolError(fmt::format(
        "quantized encoding holds code {}, the largest valid code is {}", largest, maxCode_));
  }
}

}  // namespace gradsync
