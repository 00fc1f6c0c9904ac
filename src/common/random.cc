// splitMixUniforms (random.h) per instruction set. AVX2 has no 64-bit multiply: each of
// SplitMix64's two products is built from a 32 x 32 -> 64-bit one and a 32-bit one that gives
// both cross products (the high half of the high halves' product falls outside 64 bits; 10-15%
// more uniforms a second than three 64-bit products, measured alone); AVX-512DQ multiplies
// 64-bit lanes directly.
// Both write each lane's two 24-bit values as adjacent 32-bit integers and convert them to
// float exactly, as the scalar loop does.
#include "common/random.h"

#include "common/simd.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync::rng {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMix1 = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kMix2 = 0x94D049BB133111EBull;
constexpr float kUnit = 1.0f / 16777216.0f;

// Pairs [pair, pairs) of u from draws first + pair, ...
void uniformsScalar(uint64_t seed, uint64_t first, float* u, size_t pair, size_t pairs) {
  for (; pair < pairs; ++pair) {
    const uint64_t bits = splitMix64(seed + (first + pair) * kGamma);
    u[2 * pair] = unitFloat(bits);
    u[2 * pair + 1] = unitFloat(bits << 24);
  }
}

#if GS_SIMD_X86
// Lane-wise x * c mod 2^64 from 32-bit products: lo*lo + ((hi*lo + lo*hi) << 32). The two
// cross products need only their low 32 bits: one 32-bit multiply of x's halves by c's halves
// swapped gives lo*hi in the low half of each lane and hi*lo in the high half; shifting it up
// and adding puts their sum in the high half, and the mask drops the low half.
GS_TARGET_AVX2 inline __m256i multiply64(__m256i x, uint64_t c) {
  const __m256i cLow = _mm256_set1_epi64x(static_cast<int64_t>(c & 0xffffffffu));
  const __m256i cSwapped = _mm256_set1_epi64x(static_cast<int64_t>((c << 32) | (c >> 32)));
  const __m256i highHalf = _mm256_set1_epi64x(static_cast<int64_t>(0xffffffff00000000ull));
  const __m256i low = _mm256_mul_epu32(x, cLow);
  const __m256i halves = _mm256_mullo_epi32(x, cSwapped);
  const __m256i cross =
      _mm256_and_si256(_mm256_add_epi64(halves, _mm256_slli_epi64(halves, 32)), highHalf);
  return _mm256_add_epi64(low, cross);
}

GS_TARGET_AVX2 void uniformsAvx2(uint64_t seed, uint64_t first, float* u, size_t pairs) {
  const __m256i step = _mm256_set1_epi64x(static_cast<int64_t>(4 * kGamma));
  // Lane k holds seed + (first + k) * gamma + gamma (SplitMix64's own increment).
  __m256i x = _mm256_set_epi64x(static_cast<int64_t>(seed + (first + 3) * kGamma + kGamma),
                                static_cast<int64_t>(seed + (first + 2) * kGamma + kGamma),
                                static_cast<int64_t>(seed + (first + 1) * kGamma + kGamma),
                                static_cast<int64_t>(seed + first * kGamma + kGamma));
  const __m256i low24 = _mm256_set1_epi64x(0xffffff);
  const __m256 unit = _mm256_set1_ps(kUnit);
  size_t pair = 0;
  for (; pair + 4 <= pairs; pair += 4) {
    __m256i z = multiply64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), kMix1);
    z = multiply64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), kMix2);
    z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
    // Low 32 bits: the top 24 bits of the draw; high 32 bits: the next 24.
    const __m256i both =
        _mm256_or_si256(_mm256_srli_epi64(z, 40),
                        _mm256_slli_epi64(_mm256_and_si256(_mm256_srli_epi64(z, 16), low24), 32));
    _mm256_storeu_ps(u + 2 * pair, _mm256_mul_ps(_mm256_cvtepi32_ps(both), unit));
    x = _mm256_add_epi64(x, step);
  }
  uniformsScalar(seed, first, u, pair, pairs);
}

// GCC 12 says the AVX-512 intrinsics' own placeholder operands "may be used uninitialized"
// (a false positive inside immintrin.h).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
GS_TARGET_AVX512 void uniformsAvx512(uint64_t seed, uint64_t first, float* u, size_t pairs) {
  const __m512i step = _mm512_set1_epi64(static_cast<int64_t>(8 * kGamma));
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i x =
      _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(seed + first * kGamma + kGamma)),
                       _mm512_mullo_epi64(lanes, _mm512_set1_epi64(static_cast<int64_t>(kGamma))));
  const __m512i mix1 = _mm512_set1_epi64(static_cast<int64_t>(kMix1));
  const __m512i mix2 = _mm512_set1_epi64(static_cast<int64_t>(kMix2));
  const __m512i low24 = _mm512_set1_epi64(0xffffff);
  const __m512 unit = _mm512_set1_ps(kUnit);
  size_t pair = 0;
  for (; pair + 8 <= pairs; pair += 8) {
    __m512i z = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), mix1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), mix2);
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    const __m512i both =
        _mm512_or_si512(_mm512_srli_epi64(z, 40),
                        _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(z, 16), low24), 32));
    _mm512_storeu_ps(u + 2 * pair, _mm512_mul_ps(_mm512_cvtepi32_ps(both), unit));
    x = _mm512_add_epi64(x, step);
  }
  uniformsScalar(seed, first, u, pair, pairs);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void splitMixUniforms(uint64_t seed, uint64_t first, float* u, size_t n) {
  const size_t pairs = (n + 1) / 2;
#if GS_SIMD_X86
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return uniformsAvx512(seed, first, u, pairs);
    case simd::Path::kAvx2:
      return uniformsAvx2(seed, first, u, pairs);
    case simd::Path::kScalar:
      break;
  }
#endif
  uniformsScalar(seed, first, u, 0, pairs);
}

}  // namespace gradsync::rng
