#include "compress/select_gather.h"

#include <bit>

#include "common/check.h"
#include "common/simd.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync::gather {

#if GS_SIMD_X86
// GCC 12 says the AVX-512 intrinsics' own placeholder operands "may be used uninitialized"
// (a false positive inside immintrin.h; as in common/half.cc).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

// Appends the lanes of `keys` at or above `lowest` and their indices (`first`, first + 1, ...)
// at indices[n] and keys[n]; returns the new n. Compressed in registers and stored whole: a
// compressing store to memory is microcoded on AMD's Zen 4, tens of times slower. Stored even
// when no lane is kept: about every fourth group keeps one, and a branch on it mispredicts.
GS_TARGET_AVX512 inline size_t keep(__m512i key, __m512i lowest, size_t first, uint32_t* indices,
                                    uint32_t* keys, size_t n) {
  const __mmask16 hit = _mm512_cmpge_epu32_mask(key, lowest);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i index = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(first)));
  _mm512_storeu_si512(keys + n, _mm512_maskz_compress_epi32(hit, key));
  _mm512_storeu_si512(indices + n, _mm512_maskz_compress_epi32(hit, index));
  return n + static_cast<size_t>(std::popcount(static_cast<unsigned>(hit)));
}

// AVX2 has no compressing instruction: for each of the 256 masks of 8 lanes, the kept lanes'
// order moved to the front, a permutation for vpermd.
struct CompressLanes {
  alignas(32) uint32_t order[256][8];
  constexpr CompressLanes() : order() {
    for (unsigned mask = 0; mask < 256; ++mask) {
      unsigned kept = 0;
      for (unsigned lane = 0; lane < 8; ++lane) {
        if (((mask >> lane) & 1u) != 0) order[mask][kept++] = lane;
      }
    }
  }
};
constexpr CompressLanes kCompressLanes;

}  // namespace

GS_TARGET_AVX2 size_t magnitudesAvx2(const float* x, size_t count, size_t base, uint32_t lowest,
                                     uint32_t* indices, uint32_t* keys) {
  GS_CHECK(count % kLanes == 0);
  // key >= lowest as key > lowest - 1 in signed lanes: keys are below 2^31, and lowest 0 wraps
  // to -1, below every key.
  const __m256i belowLowest = _mm256_set1_epi32(static_cast<int32_t>(lowest - 1));
  const __m256i noSign = _mm256_set1_epi32(0x7fffffff);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  size_t n = 0;
  for (size_t j = 0; j < count; j += 8) {
    const __m256i key =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)), noSign);
    const auto mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, belowLowest))));
    const __m256i order =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompressLanes.order[mask]));
    const __m256i index = _mm256_add_epi32(lanes, _mm256_set1_epi32(static_cast<int>(base + j)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + n),
                        _mm256_permutevar8x32_epi32(key, order));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(indices + n),
                        _mm256_permutevar8x32_epi32(index, order));
    n += static_cast<size_t>(std::popcount(mask));
  }
  return n;
}

GS_TARGET_AVX512 size_t magnitudesAvx512(const float* x, size_t count, size_t base, uint32_t lowest,
                                         uint32_t* indices, uint32_t* keys) {
  GS_CHECK(count % kLanes == 0);
  const __m512i low = _mm512_set1_epi32(static_cast<int>(lowest));
  const __m512i noSign = _mm512_set1_epi32(0x7fffffff);
  size_t n = 0;
  for (size_t j = 0; j < count; j += kLanes) {
    const __m512i key = _mm512_and_si512(_mm512_loadu_si512(x + j), noSign);
    n = keep(key, low, base + j, indices, keys, n);
  }
  return n;
}

#pragma GCC diagnostic pop

#else

size_t magnitudesAvx2(const float*, size_t, size_t, uint32_t, uint32_t*, uint32_t*) {
  GS_CHECK(false);
  return 0;
}
size_t magnitudesAvx512(const float*, size_t, size_t, uint32_t, uint32_t*, uint32_t*) {
  GS_CHECK(false);
  return 0;
}
#endif

}  // namespace gradsync::gather
